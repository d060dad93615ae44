"""B3's baseline: what a Spark engineer writes without millpond. Read the JSON files, write one Delta table.

Same session settings as millpond (millpond.driver.session), the same schema, the same `_source_file` and
`_ingested_at` columns, and the same rows: malformed lines are dropped through Spark's corrupt-record column (so the
table equals bronze and the reference, bench/check.py); no quarantine, no rescue, no exactly-once bookkeeping.
Prints one JSON line.

    python -m bench.jobs.plain_spark <landing folder> <delta path>
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from millpond.driver.driver_jit import java_options
from millpond.driver.session import build_spark_session
from millpond.spec import Pipeline, load_pipeline


def main(landing: str, target: str) -> int:
    return timed_job(
        "bench:plain-spark",
        lambda spark, pipeline: read_landed(spark, pipeline, landing).write.format("delta").mode("append").save(target),
        target,
    )


def read_landed(spark: SparkSession, pipeline: Pipeline, landing: str) -> DataFrame:
    """The landed JSON's well-formed lines with the schema and bronze's two bookkeeping columns, as a Spark engineer
    would read them."""
    return (
        spark.read.schema(f"{pipeline.sources['landing.activity'].schema}, _corrupt_record STRING")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .json(landing)
        .where("_corrupt_record IS NULL")
        .drop("_corrupt_record")
        .selectExpr("*", "_metadata.file_path AS _source_file", "current_timestamp() AS _ingested_at")
    )


def timed_job(name: str, work: Callable[[SparkSession, Pipeline], None], counted: str) -> int:
    """Run `work` from a ready session and print one JSON line: its seconds, and the rows of the Delta table
    `counted` (so a side that read nothing cannot look fast)."""
    pipeline = load_pipeline("activity")
    # The driver JVM options millpond runs this much input with (the full JIT): the same JVM on both sides.
    spark = build_spark_session(name, pipeline.shuffle_partitions, driver_java_options=java_options("full"))
    started = time.perf_counter()
    work(spark, pipeline)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "rows": spark.read.format("delta").load(counted).count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
