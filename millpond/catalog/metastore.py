"""The Spark settings of a session that sees the catalog: Spark's built-in Hive metastore client, its database in
PostgreSQL (millpond.catalog.database). No pyspark import: the engine's launch and `millpond sql` read these.

Only sessions that use names get them (`millpond sql`, `millpond catalog sync`, the engine): a Hive-backed session
costs a JVM 6 to 15 s more than the in-memory catalog (measured on this host, docs/sql.md), which a pipeline run,
which reads and writes by path, has no reason to pay.
"""

from __future__ import annotations

from millpond import settings
from millpond.catalog.database import Database

POSTGRES_JDBC_JAR = "postgresql-42.7.14.jar"  # build/jars.pom.xml fetches it into the jar folder


def launch_conf(database: Database) -> dict[str, str]:
    """What the JVM must start with (all static: the catalog is chosen when the SparkContext starts)."""
    jar = settings.jars_dir() / POSTGRES_JDBC_JAR
    if not jar.is_file():
        raise RuntimeError(
            f"PostgreSQL's JDBC driver not found at {jar}. Fix: `make jars` in a checkout, or `millpond jars`"
        )
    return {
        "spark.sql.catalogImplementation": "hive",
        # The metastore's DataNucleus loads the driver through the JVM's own class loader: spark.jars is too late.
        "spark.driver.extraClassPath": str(jar),
        # Only external tables are registered (their data stays at their lake paths); a CREATE SCHEMA still needs a
        # default folder, which never holds data.
        "spark.sql.warehouse.dir": str(settings.catalog_home() / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": database.url,
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "spark.hadoop.javax.jdo.option.ConnectionUserName": database.user,
        "spark.hadoop.javax.jdo.option.ConnectionPassword": database.password,  # redacted in Spark's UI (".*password")
        # The metastore's tables are created by the first client that finds them missing. Not autoCreateAll: on
        # PostgreSQL it deadlocks on its own foreign keys at the first CREATE TABLE (two connections, one idle in
        # transaction; seen in pg_stat_activity).
        "spark.hadoop.datanucleus.schema.autoCreateTables": "true",
        "spark.hadoop.datanucleus.schema.autoCreateColumns": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
    }
