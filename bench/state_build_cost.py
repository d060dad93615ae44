"""What silver's first run over a long history costs in its dedup state, against one batch query (B8's first run).

B8's first run loses to Spark Declarative Pipelines mostly in silver, which builds the dedup state of every key of
the history where SDP's materialized view runs one batch query. This separates that cost from the rest of silver
(the gate, the write-audit-publish): each side reads the same bronze-shaped Delta table (`--rows` rows over
`--hours` hours of event time, one row in a hundred a duplicate key) and writes the deduplicated rows to a new
Delta table with Delta's own writer, in a JVM of its own with millpond's settings (RocksDB state store):
- `stream`: silver's shape: a Delta stream, a one-hour watermark on the event time, dropDuplicates on (Device,
  Index, Recorded_At), `availableNow`, into Delta's streaming sink. The first batch puts every key; Spark then runs
  a batch with no input that evicts the keys the watermark passed.
- `stream_changelog`: the same with RocksDB's changelog checkpointing on (a commit writes the batch's changes
  instead of a new snapshot).
- `stream_untracked`: the same with RocksDB's count of the state's rows off (`trackTotalNumberOfRows`: with it on,
  each put and each remove first reads its key to keep the count the query's progress reports as state rows).
- `stream_stateless`: the same stream and sink without the watermark and dropDuplicates (every row written): what
  the streaming machinery costs without a state store.
- `batch`: one batch query, dropDuplicates on the same keys (what a materialized view computes).
Sides alternate; every deduplicating side must write the same number of rows, none of them a repeated key, and the
stateless side every row. Each streamed side records every batch's phases and its state operator's timings (Spark
sums those over the state's partitions). Writes bench/results-state-build.json (not
committed). Not a timed test. Usage:

    .venv/bin/python bench/state_build_cost.py [--rows 6500000] [--hours 100] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SIDES = ("stream", "stream_changelog", "stream_untracked", "stream_stateless", "batch")
KEYS = ["Device", "Index", "Recorded_At"]
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
TRACK_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


# Imported inside functions: pyspark and millpond's session, only in the children (one JVM per side).


def session(name: str) -> SparkSession:
    from millpond.driver.driver_jit import java_options
    from millpond.driver.session import build_spark_session

    return build_spark_session(f"bench:state-build-{name}", 2, driver_java_options=java_options("full"))


def generate(bronze: str, rows: int, hours: int) -> None:
    """Bronze's columns; keys repeat once in a hundred rows, event time spread evenly over `hours`."""
    from pyspark.sql import functions as F

    spark = session("generate")
    key = F.when(F.col("id") % 100 == 0, F.col("id") - 1).otherwise(F.col("id"))
    seconds = F.lit(1_790_000_000) + F.floor(key * (hours * 3600) / rows)
    (
        spark.range(rows)
        .select(
            F.concat(F.lit("device_"), (key % 40).cast("string")).alias("Device"),
            key.alias("Index"),
            seconds.cast("timestamp").alias("Recorded_At"),
            F.lit("walk").alias("gt"),
            F.rand(7).alias("x"),
        )
        .repartition(20)
        .write.format("delta")
        .save(bronze)
    )
    spark.stop()


def run_side(side: str, bronze: str, work: str) -> dict:
    """One side in this process: seconds from a ready session to the table written, and the rows written."""
    spark = session(side)
    spark.conf.set(CHANGELOG, str(side == "stream_changelog").lower())
    spark.conf.set(TRACK_ROWS, str(side != "stream_untracked").lower())
    table = f"{work}/table"
    started = time.perf_counter()
    if side == "batch":
        spark.read.format("delta").load(bronze).dropDuplicates(KEYS).write.format("delta").save(table)
    else:
        stream = spark.readStream.format("delta").load(bronze)
        if side != "stream_stateless":
            stream = stream.withWatermark("Recorded_At", "1 hour").dropDuplicates(KEYS)
        query = (
            stream.writeStream.format("delta")
            .option("checkpointLocation", f"{work}/checkpoint")
            .trigger(availableNow=True)
            .start(table)
        )
        query.awaitTermination()
    seconds = time.perf_counter() - started
    written = spark.read.format("delta").load(table)
    figure: dict = {"seconds": seconds, "rows": written.count(), "keys": written.select(*KEYS).distinct().count()}
    if side != "batch":  # where the time went, batch by batch (the eviction batch has no input)
        figure["batches"] = [
            {
                "input_rows": p.numInputRows,
                "phases_ms": p.durationMs,
                "state_ms_summed_over_partitions": [
                    {
                        "updates": op.allUpdatesTimeMs,
                        "removals": op.allRemovalsTimeMs,
                        "commit": op.commitTimeMs,
                        "rows_total": op.numRowsTotal,
                        "rows_removed": op.numRowsRemoved,
                        **{k: v for k, v in op.customMetrics.items() if "Latency" in k or "Time" in k},
                    }
                    for op in p.stateOperators
                ],
            }
            for p in query.recentProgress
        ]
    return figure


def child(args: list[str], lake: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "MILLPOND_LAKE": lake},
    )
    if done.returncode:
        raise SystemExit(f"{args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6_500_000)
    parser.add_argument("--hours", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--side", choices=(*SIDES, "generate"), help=argparse.SUPPRESS)  # a child: one JVM
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "generate":
        generate(f"{args.work}/bronze", args.rows, args.hours)
        print("{}")
        return 0
    if args.side:
        print(json.dumps(run_side(args.side, f"{args.work}/../bronze", args.work)))
        return 0

    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="state-build-") as lake:
        child(["--side", "generate", "--work", lake, "--rows", str(args.rows), "--hours", str(args.hours)], lake)
        for repeat in range(args.repeats):
            for side in SIDES if repeat % 2 == 0 else tuple(reversed(SIDES)):
                work = Path(lake) / "work"
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir()
                runs[side].append(child(["--side", side, "--work", str(work)], lake))
    deduplicated = {r["rows"] for side, side_runs in runs.items() if side != "stream_stateless" for r in side_runs}
    repeated = [r for side, rs in runs.items() if side != "stream_stateless" for r in rs if r["keys"] != r["rows"]]
    if len(deduplicated) != 1 or repeated or any(r["rows"] != args.rows for r in runs["stream_stateless"]):
        raise SystemExit(f"the sides wrote different rows: {runs}")
    taken = {side: [round(r["seconds"], 2) for r in rs] for side, rs in runs.items()}
    figure = {
        "what": "seconds from a ready session to the deduplicated table written, each side a JVM of its own",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cores": os.cpu_count(), "load_average": os.getloadavg()},
        "rows_in": args.rows,
        "rows_written": deduplicated.pop(),
        "hours": args.hours,
        "seconds": {s: {"median": statistics.median(t), "all": t} for s, t in taken.items()},
        "batches": {side: [r["batches"] for r in runs[side]] for side in SIDES if side != "batch"},
        "stream_over_batch": round(statistics.median(taken["stream"]) / statistics.median(taken["batch"]), 2),
    }
    out = REPO / "bench" / "results-state-build.json"
    out.write_text(json.dumps(figure, indent=2) + "\n")
    print(json.dumps(figure, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
