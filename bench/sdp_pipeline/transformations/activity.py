"""The activity pipeline in Spark Declarative Pipelines: what a Spark user writes instead of a millpond spec.

Same tables and the same results as pipelines/activity.yaml (checked against tests/support/reference.py before any
figure is kept): bronze keeps every well-formed landed line once, silver drops rows without a device or time and
deduplicates on (Device, Index, Recorded_At), gold counts per device and aggregates per UTC hour and activity.

What SDP offers shapes two choices:
- bronze is a streaming table (incremental); malformed lines are dropped, as SDP has no quarantine;
- silver (silver.sql) is a materialized view, which SDP recomputes in full each update: in pyspark 4.2 a Python
  `dropDuplicates` or `withColumn` on a pipeline dataset fails at definition time (TABLE_OR_VIEW_NOT_FOUND; fixed in
  4.3), so silver keeps the first row per key with a window, in SQL. The gold views are materialized views,
  recomputed in full each update like millpond's complete-mode tables.
"""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

spark: SparkSession = globals()["spark"]  # set by spark-pipelines before it runs this file

SCHEMA = (
    "Recorded_At TIMESTAMP, Device STRING, Index BIGINT, Model STRING, User STRING, gt STRING, "
    "x DOUBLE, y DOUBLE, z DOUBLE, _corrupt_record STRING"
)


@dp.table(name="bronze_activity")
def bronze_activity() -> DataFrame:
    return (
        spark.readStream.schema(SCHEMA)
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .option("maxFilesPerTrigger", 1000)
        .json(spark.conf.get("spark.millpond.bench.landing"))
        .where("_corrupt_record IS NULL")
        .drop("_corrupt_record")
        .selectExpr("*", "_metadata.file_path AS _source_file", "current_timestamp() AS _ingested_at")
    )


@dp.materialized_view(name="gold_device_counts")
def gold_device_counts() -> DataFrame:
    return spark.read.table("silver_activity").groupBy("Device").agg(F.count("*").alias("total_recordings"))


@dp.materialized_view(name="gold_activity_hourly")
def gold_activity_hourly() -> DataFrame:
    return (
        spark.read.table("silver_activity")
        .groupBy(F.window("Recorded_At", "1 hour").start.alias("hour"), "gt")
        .agg(
            F.count("*").alias("recordings"),
            F.avg("x").alias("avg_x"),
            F.avg("y").alias("avg_y"),
            F.avg("z").alias("avg_z"),
        )
    )
