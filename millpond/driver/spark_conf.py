"""The Spark settings every millpond JVM starts with: a run's own (millpond.driver.session), the Connect server's
(millpond.driver.connect_server) and Airflow's spark-submit (millpond.airflow.spark_app) take the same ones from
here. No pyspark import: Airflow reads these at task run time without it."""

from __future__ import annotations

from millpond.driver.driver_jit import executor_java_options

# Settings every millpond session shares; spark-submit (Airflow) passes the same ones with --conf.
BASE_CONF = {
    # Delta's SQL, and millpond's functions (jvm/: bronze's json parse and new-field check, sources.parse_json_lines).
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension,millpond.spark.MillpondExtensions",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # Delta rebuilds a table snapshot with 50 tasks by default: seconds of overhead on small local tables.
    "spark.databricks.delta.snapshotPartitions": "2",
    # RocksDB commits a full (incremental-file) snapshot every batch, so a run loads the newest version only. The
    # default HDFS-backed store snapshots in background maintenance that a short availableNow run rarely reaches,
    # and then replays every delta since: its load time grew with history (B1, B7). A checkpoint keeps the provider
    # it was created with (offset metadata), so existing checkpoints keep working.
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    # PySpark 4 sends each DataFrame call's Python call site to the JVM (several Py4J round trips per call, ~3000
    # to plan one json parse, about 0.2 s per plan, and more in GX's). The sites would name millpond's own
    # lines, never a user's; a failed run's error names the failing table instead.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # With MILLPOND_JSON_FUNCTIONS=off, bronze finds a json line's new fields through from_json(.., 'map<string,
    # variant>'): a new field holding an object that repeats a key would fail that parse and be lost, where the line
    # itself parses (a struct keeps a repeated key's last value, as JSON readers do). Variants then keep the last.
    "spark.sql.variant.allowDuplicateKeys": "true",
}


def base_conf() -> dict[str, str]:
    """BASE_CONF, plus the executors' JVM options: the driver's are chosen per run (millpond.driver.driver_jit)."""
    executor = executor_java_options()
    return {**BASE_CONF, **({"spark.executor.extraJavaOptions": executor} if executor else {})}


# A file-stream batch reaches Spark as its files' explicit paths (FileStreamSource.getBatch), and Spark "lists" more
# than 32 paths with a Spark job of one task per path: about 1 s of B3's cold 200-file batch (docs/benchmarks.md), where
# the plain batch job reading the folder lists it on the driver. Under a local master those tasks run on the
# driver's own cores anyway, so it lists there: a stat per file. A cluster keeps Spark's default (an object store's
# listing is remote).
LISTING_THRESHOLD, LOCAL_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold", 100_000
