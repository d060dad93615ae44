"""A Spark session that sees the catalog: the lake's engine when one is up and opened the catalog (a second, not a
JVM start), else a JVM of this process's own on the Hive metastore (millpond.catalog.metastore), its database
started first if need be."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from millpond import settings
from millpond.catalog import database, metastore
from millpond.catalog.sync import CATALOG_IMPLEMENTATION, HIVE
from millpond.driver import connect_server
from millpond.driver.session import build_spark_session, connect_session

if TYPE_CHECKING:  # annotations only: the session is built by millpond.driver.session
    from pyspark.sql import SparkSession


def catalog_session(say: Callable[[str], None] = print) -> SparkSession:
    reached = database.connection(say)  # started first if stopped, on the engine's path too
    spark = _on_engine(say)
    if spark is None:
        spark = build_spark_session("millpond-catalog", launch_conf=metastore.launch_conf(reached))
        if spark.conf.get(CATALOG_IMPLEMENTATION, "") != HIVE:
            raise RuntimeError(
                "this process already runs a Spark session without the catalog, and a JVM has one catalog for its "
                "life. Fix: use the catalog from a new process (`millpond sql`)"
            )
    _first_contact(spark)
    return spark


def _on_engine(say: Callable[[str], None]) -> SparkSession | None:
    """A session on the lake's engine if one is up, runs this code and opened the catalog; else None, saying why
    when there is an engine that cannot serve."""
    state = connect_server.read_state()
    if state is None or not connect_server.alive(state):
        return None
    try:
        spark = connect_session(state.remote)
    except connect_server.EngineError as exc:
        say(f"millpond: not using the engine ({exc}); starting a JVM of this command's own")
        return None
    if spark.conf.get(CATALOG_IMPLEMENTATION, "") != HIVE:
        spark.stop()
        say("millpond: the engine was started without the catalog; starting a JVM of this command's own")
        return None
    say(f"millpond: on the engine (pid {state.pid}, port {state.port})")
    return spark


def _first_contact(spark: SparkSession) -> None:
    """The first metastore call of a session creates the metastore's own tables where they are missing: one process
    at a time does it (two at once both try to create them, and one fails), then every later one skips the lock."""
    home = settings.catalog_home()
    ready = home / database.METASTORE_READY
    url = settings.METASTORE_URL.raw() or "embedded"  # made again with the database (database._create_database)
    if ready.is_file() and ready.read_text().strip() == url:
        return
    with database.locked(home, ".metastore-lock"):
        spark.sql("SHOW DATABASES").collect()
        ready.write_text(url + "\n")
