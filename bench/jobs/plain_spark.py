"""B3's baseline: what a Spark engineer writes without millpond. Read the JSON files, write one Delta table.

Same session settings as millpond (spark_jobs.session), the same schema, the same `_source_file` and
`_ingested_at` columns; no quarantine, no rescue, no exactly-once bookkeeping. Prints one JSON line.

    python -m bench.jobs.plain_spark <landing folder> <delta path>
"""

from __future__ import annotations

import json
import sys
import time

from millpond.spec import load_pipeline
from spark_jobs.session import build_spark_session


def main(landing: str, target: str) -> int:
    pipeline = load_pipeline("activity")
    spark = build_spark_session("bench:plain-spark", pipeline.shuffle_partitions)
    started = time.perf_counter()
    rows = (
        spark.read.schema(pipeline.sources["landing.activity"].schema).json(landing)
        .selectExpr("*", "_metadata.file_path AS _source_file", "current_timestamp() AS _ingested_at")
    )  # fmt: skip
    rows.write.format("delta").mode("append").save(target)
    seconds = time.perf_counter() - started
    written = spark.read.format("delta").load(target).count()
    print(json.dumps({"seconds": seconds, "rows": written}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
