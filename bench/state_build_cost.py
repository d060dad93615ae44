"""What silver's first run over a long history costs in its dedup state, against one batch query (B8's first run).

B8's first run loses to Spark Declarative Pipelines mostly in silver, which builds the dedup state of every key of
the history where SDP's materialized view runs one batch query. This separates that cost from the rest of silver
(the gate, the write-audit-publish): each side reads the same bronze-shaped Delta table (`--rows` rows over
`--hours` hours of event time, one row in a hundred a duplicate key) and writes the deduplicated rows to a new
Delta table with Delta's own writer, in a JVM of its own with millpond's settings (RocksDB state store):
- `stream`: silver's shape: a Delta stream, a one-hour watermark on the event time, dropDuplicates on (Device,
  Index, Recorded_At), `availableNow`, into Delta's streaming sink.
- `stream_changelog`: the same with RocksDB's changelog checkpointing on (a commit writes the batch's changes
  instead of a new snapshot).
- `stream_untracked`: the same with RocksDB's count of the state's rows off (`trackTotalNumberOfRows`: with it on,
  every put and remove first reads the key to keep the count, which the query's progress reports as the state's
  rows).
- `batch`: one batch query, dropDuplicates on the same keys (what a materialized view computes).
Sides alternate; every side must write the same number of rows. Writes bench/results-state-build.json (not
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SIDES = ("stream", "stream_changelog", "stream_untracked", "batch")
KEYS = ["Device", "Index", "Recorded_At"]
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
TRACK_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


def session(name: str):
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
        query = (
            spark.readStream.format("delta")
            .load(bronze)
            .withWatermark("Recorded_At", "1 hour")
            .dropDuplicates(KEYS)
            .writeStream.format("delta")
            .option("checkpointLocation", f"{work}/checkpoint")
            .trigger(availableNow=True)
            .start(table)
        )
        query.awaitTermination()
    seconds = time.perf_counter() - started
    figure: dict = {"seconds": seconds, "rows": spark.read.format("delta").load(table).count()}
    if side != "batch":  # where the batch's time went: Spark's phases, and the state operator's own timings
        progress = [p for p in query.recentProgress if p.numInputRows]
        figure["batches"] = len(progress)
        figure["phases_ms"] = [p.durationMs for p in progress]
        figure["state_ms"] = [
            {
                "updates": op.allUpdatesTimeMs,
                "removals": op.allRemovalsTimeMs,
                "commit": op.commitTimeMs,
                "rows_total": op.numRowsTotal,
                **{k: v for k, v in op.customMetrics.items() if "Latency" in k or "Time" in k},
            }
            for p in progress
            for op in p.stateOperators
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
    rows = {r["rows"] for side_runs in runs.values() for r in side_runs}
    if len(rows) != 1:
        raise SystemExit(f"the sides wrote different rows: {runs}")
    taken = {side: [round(r["seconds"], 2) for r in rs] for side, rs in runs.items()}
    figure = {
        "what": "seconds from a ready session to the deduplicated table written, each side a JVM of its own",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cores": os.cpu_count(), "load_average": os.getloadavg()},
        "rows_in": args.rows,
        "rows_written": rows.pop(),
        "hours": args.hours,
        "seconds": {s: {"median": statistics.median(t), "all": t} for s, t in taken.items()},
        "stream_timings": {
            s: [{k: r[k] for k in ("batches", "phases_ms", "state_ms")} for r in runs[s]] for s in SIDES if s != "batch"
        },
        "stream_over_batch": round(statistics.median(taken["stream"]) / statistics.median(taken["batch"]), 2),
    }
    out = REPO / "bench" / "results-state-build.json"
    out.write_text(json.dumps(figure, indent=2) + "\n")
    print(json.dumps(figure, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
