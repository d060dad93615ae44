"""The Spark settings of a session that sees the catalog: Spark's built-in Hive metastore client, its database in
PostgreSQL (millpond.catalog.database). No pyspark import: the engine's launch and `millpond sql` read these.

Only sessions that use names get them (`millpond sql`, `millpond catalog sync`, the engine): a Hive-backed session
costs a JVM 6 to 15 s more than the in-memory catalog (measured on this host, docs/sql.md), which a pipeline run,
which reads and writes by path, has no reason to pay.
"""

from __future__ import annotations

import os
from pathlib import Path
from xml.sax.saxutils import escape

from millpond import settings
from millpond.catalog.database import Database, write_private

POSTGRES_JDBC_JAR = "postgresql-42.7.14.jar"  # build/jars.pom.xml fetches it into the jar folder


def launch_conf(database: Database) -> dict[str, str]:
    """What the JVM must start with (all static: the catalog is chosen when the SparkContext starts). How to reach
    the database, password included, is in a hive-site.xml of the catalog home's private folder on the driver's class
    path, where Spark's Hive client reads it: on a command line (`--conf`), `ps` would show the password."""
    jar = settings.jars_dir() / POSTGRES_JDBC_JAR
    if not jar.is_file():
        raise RuntimeError(
            f"PostgreSQL's JDBC driver not found at {jar}. Fix: `make jars` in a checkout, or `millpond jars`"
        )
    return {
        "spark.sql.catalogImplementation": "hive",
        # The metastore's DataNucleus loads the driver through the JVM's own class loader: spark.jars is too late.
        "spark.driver.extraClassPath": os.pathsep.join([str(jar), str(private_conf(database))]),
        # Only external tables are registered (their data stays at their lake paths); a CREATE SCHEMA still needs a
        # default folder, which never holds data.
        "spark.sql.warehouse.dir": str(settings.catalog_home() / "warehouse"),
        # The metastore's tables are created by the first client that finds them missing. Not autoCreateAll: on
        # PostgreSQL it deadlocks on its own foreign keys at the first CREATE TABLE (two connections, one idle in
        # transaction; seen in pg_stat_activity).
        "spark.hadoop.datanucleus.schema.autoCreateTables": "true",
        "spark.hadoop.datanucleus.schema.autoCreateColumns": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
    }


def private_conf(database: Database) -> Path:
    """A folder only this user may open, holding the hive-site.xml that says how to reach the database."""
    folder = settings.catalog_home() / "spark-conf"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    properties = {
        "javax.jdo.option.ConnectionURL": database.url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": database.user,
        "javax.jdo.option.ConnectionPassword": database.password,
    }
    body = "".join(
        f"  <property><name>{escape(name)}</name><value>{escape(value)}</value></property>\n"
        for name, value in properties.items()
    )
    target = folder / "hive-site.xml"
    text = f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>'
    if not target.is_file() or target.read_text() != text + "\n":
        write_private(target, text)
    return folder
