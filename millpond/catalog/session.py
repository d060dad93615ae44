"""A Spark session that sees the catalog: a JVM of this process's own on the Hive metastore (millpond.catalog
.metastore), its database started first if need be."""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from typing import TYPE_CHECKING

from millpond import settings
from millpond.catalog import database, metastore
from millpond.driver.session import build_spark_session

if TYPE_CHECKING:  # annotations only: the session is built by millpond.driver.session
    from pyspark.sql import SparkSession


def catalog_session(say: Callable[[str], None] = print) -> SparkSession:
    reached = database.connection(say)
    spark = build_spark_session("millpond-catalog", launch_conf=metastore.launch_conf(reached))
    if spark.conf.get("spark.sql.catalogImplementation", "") != "hive":
        raise RuntimeError(
            "this process already runs a Spark session without the catalog, and a JVM has one catalog for its life. "
            "Fix: use the catalog from a new process (`millpond sql`)"
        )
    _first_contact(spark, reached)
    return spark


def _first_contact(spark: SparkSession, reached: database.Database) -> None:
    """The first metastore call of a session creates the metastore's own tables where they are missing: one process
    at a time does it (two at once both try to create them, and one fails), then every later one skips the lock."""
    home = settings.catalog_home()
    home.mkdir(parents=True, exist_ok=True)
    ready = home / database.METASTORE_READY
    if ready.is_file() and ready.read_text().strip() == reached.url:
        return
    with open(home / ".metastore-lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        spark.sql("SHOW DATABASES").collect()
        ready.write_text(reached.url + "\n")
