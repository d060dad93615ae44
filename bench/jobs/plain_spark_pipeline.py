"""B4's floor: plain Spark doing DuckDB's work (bronze, silver's dedup, gold.device_counts) as three batch writes.

No streaming, no checkpoints, no quarantine, no gate: what the engine itself costs for the same result, so B4 can
say how much of its ratio is Spark's and how much is millpond's. Same session settings as millpond.

    python -m bench.jobs.plain_spark_pipeline <landing folder> <output folder>

Prints one JSON line; `seconds` starts with a ready session, as both other sides of B4 do.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from millpond.spec import load_pipeline
from spark_jobs.session import build_spark_session


def main(landing: str, output: str) -> int:
    pipeline = load_pipeline("activity")
    spark = build_spark_session("bench:plain-spark-pipeline", pipeline.shuffle_partitions)
    bronze, silver, gold = (str(Path(output) / name) for name in ("bronze", "silver", "device_counts"))
    started = time.perf_counter()
    (spark.read.schema(pipeline.sources["landing.activity"].schema).json(landing)
     .selectExpr("*", "_metadata.file_path AS _source_file", "current_timestamp() AS _ingested_at")
     .write.format("delta").save(bronze))  # fmt: skip
    (spark.read.format("delta").load(bronze).where("Device IS NOT NULL AND Recorded_At IS NOT NULL")
     .dropDuplicates(["Device", "Index", "Recorded_At"]).write.format("delta").save(silver))  # fmt: skip
    (spark.read.format("delta").load(silver).groupBy("Device").count()
     .withColumnRenamed("count", "total_recordings").write.format("delta").save(gold))  # fmt: skip
    seconds = time.perf_counter() - started
    rows = spark.read.format("delta").load(bronze).count()
    print(json.dumps({"seconds": seconds, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
