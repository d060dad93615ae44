"""The example project's own Spark code: transforms and stateful functions its specs name by module path
(`spark_jobs.transforms.sessions:sessions`). millpond puts the project folder on the path of every process that
imports them, and ships this package to a cluster's executors."""
