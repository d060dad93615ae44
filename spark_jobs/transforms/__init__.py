"""Pure `DataFrame -> DataFrame` transforms referenced from specs as `spark_jobs.transforms.<module>:<function>`."""
