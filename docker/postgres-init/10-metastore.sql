-- The catalog's database (docs/sql.md): the Hive metastore millpond's Spark sessions share, beside Airflow's own
-- database on the same server. Run by the postgres image once, when its data volume is first initialised.
CREATE DATABASE metastore OWNER airflow;
