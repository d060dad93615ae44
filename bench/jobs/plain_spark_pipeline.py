"""B4's floor: plain Spark doing DuckDB's work (bronze, silver's dedup, gold.device_counts) as three batch writes.

No streaming, no checkpoints, no quarantine, no gate: what the engine itself costs for the same result, so B4 can
say how much of its ratio is Spark's and how much is millpond's. Same session settings as millpond.

    python -m bench.jobs.plain_spark_pipeline <landing folder> <output folder>

Prints one JSON line; `seconds` starts with a ready session, as both other sides of B4 do.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.jobs.plain_spark import read_landed, timed_job


def main(landing: str, output: str) -> int:
    bronze, silver, gold = (str(Path(output) / name) for name in ("bronze", "silver", "device_counts"))

    def work(spark, pipeline) -> None:
        read_landed(spark, pipeline, landing).write.format("delta").save(bronze)
        (
            spark.read.format("delta")
            .load(bronze)
            .where("Device IS NOT NULL AND Recorded_At IS NOT NULL")
            .dropDuplicates(["Device", "Index", "Recorded_At"])
            .write.format("delta")
            .save(silver)
        )
        (
            spark.read.format("delta")
            .load(silver)
            .groupBy("Device")
            .count()
            .withColumnRenamed("count", "total_recordings")
            .write.format("delta")
            .save(gold)
        )

    return timed_job("bench:plain-spark-pipeline", work, bronze)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
