"""How long Airflow's processes wait for SQLite's write lock under `make up`, given to Airflow by its own settings.

`airflow standalone` runs a scheduler, an API server, a DAG processor and a triggerer against one SQLite file, which
lets one writer in at a time. Python's sqlite3 waits 5 s for that lock and then raises "database is locked", which
the API server answers with a 500 ("Database error"): CI saw one when a DAG run was triggered while Airflow started on
a busy machine. Waiting longer turns that failure into a slower answer. scripts/airflow-up.sh points Airflow's
`[database] sql_alchemy_connect_args` and `sql_alchemy_connect_args_async` here. Airflow imports this module after
reading its configuration, so the arguments follow the database it is configured with (an environment variable, a
`_cmd` or `_secret`, or airflow.cfg): SQLite's wait for SQLite, nothing for any other database (psycopg2 would
refuse a `timeout`). Each setting gets a dict of its own because Airflow adds keys to the one it is given.
"""

from airflow.configuration import conf

SQLITE_WAIT_SECONDS = 30.0
ON_SQLITE = conf.get("database", "sql_alchemy_conn").startswith("sqlite")
CONNECT_ARGS = {"timeout": SQLITE_WAIT_SECONDS} if ON_SQLITE else {}
ASYNC_CONNECT_ARGS = {"timeout": SQLITE_WAIT_SECONDS} if ON_SQLITE else {}
