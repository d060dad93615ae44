"""What handing each micro-batch to foreachBatch costs bronze: the same stream through two writers, cold.

Both sides read B3's landed files with bronze's own stream (`sources.read_landing`: text, `parse_json_lines`),
count the batch with bronze's observed metrics (`sinks.landing.landing_batch_metrics`) and append the good rows to a new
Delta table, `availableNow`:
- `foreach_batch`: bronze's structure. Spark hands foreachBatch the micro-batch already planned and executed as an
  RDD (`Scan ExistingRDD`, recorded as `foreach_batch_reads_an_executed_rdd`), so the parse and the write are two
  stages, every parsed row materialized between them.
- `delta_sink`: the observation and the good-row filter on the stream itself, into Delta's own streaming sink, which
  plans the parse and the write as one stage. (Bronze's quarantine, schema-drift policies and gates need the batch in
  Python, which this side skips: it shows what the stage boundary costs, not a drop-in writer.)
Each run is its own JVM (millpond's full-JIT options), sides alternating; each side's seconds run from a ready
session to the query's end, and both must count the same rows. Writes bench/results-sink.json (not committed).
Not a timed test. Usage:

    .venv/bin/python bench/sink_cost.py [--scale large] [--repeats 3]
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
SIDES = ("foreach_batch", "delta_sink")


def run_side(side: str, work: str) -> dict:
    """One side in this process (a fresh JVM, MILLPOND_LAKE set): seconds and the rows its observation counted."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from millpond.driver import sources
    from millpond.driver.driver_jit import java_options
    from millpond.driver.session import build_spark_session
    from millpond.driver.sinks.landing import landing_batch_metrics
    from millpond.spec import load_pipeline

    pipeline = load_pipeline("activity")
    source = pipeline.sources["landing.activity"]
    spark = build_spark_session(
        f"bench:sink-cost-{side}", pipeline.shuffle_partitions, driver_java_options=java_options("full")
    )
    checkpoint, table = f"{work}/checkpoint", f"{work}/table"
    started = time.perf_counter()
    parsed = sources.read_landing(spark, source)
    metrics = landing_batch_metrics(rereadable=True)
    dropped = (sources.RAW, sources.ERROR, sources.LINE_BUCKET)

    def good_rows(frame):
        return (
            frame.where(F.col(sources.ERROR).isNull()).drop(*dropped).withColumn("_ingested_at", F.current_timestamp())
        )

    counted: list[int] = []
    plans: list[str] = []
    if side == "foreach_batch":

        def write_batch(batch, batch_id):
            plans.append(batch._jdf.queryExecution().executedPlan().toString())
            observation = Observation(f"sink-cost-{batch_id}")
            good_rows(batch.observe(observation, *metrics)).write.format("delta").mode("append").save(table)
            counted.append(observation.get["rows"])

        query = parsed.writeStream.foreachBatch(write_batch)
    else:
        query = good_rows(parsed.observe("batch", *metrics)).writeStream.format("delta").option("path", table)
    query = query.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if side == "delta_sink":
        counted = [p["observedMetrics"]["batch"]["rows"] for p in query.recentProgress if p.get("observedMetrics")]
    figure = {"seconds": seconds, "rows": sum(counted)}
    if plans:
        figure["foreach_batch_reads_an_executed_rdd"] = all("Scan ExistingRDD" in plan for plan in plans)
    return figure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="large")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child: one side, one JVM
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.work)))
        return 0

    from bench import data

    files = data.pool(args.scale)[: data.SCALES[args.scale].b3_files]
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    data.CACHE.mkdir(parents=True, exist_ok=True)  # beside the pool: landing hard-links its files
    with tempfile.TemporaryDirectory(prefix="sink-cost-", dir=data.CACHE) as lake:
        data.land(Path(lake), files)
        for _ in range(args.repeats):
            for side in SIDES:
                work = Path(lake) / "work"
                shutil.rmtree(work, ignore_errors=True)
                child = subprocess.run(
                    [sys.executable, __file__, "--side", side, "--work", str(work)],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYSPARK_PYTHON": sys.executable, "MILLPOND_LAKE": lake},
                )
                if child.returncode:
                    raise SystemExit(f"{side} failed:\n{child.stderr[-3000:]}")
                runs[side].append(json.loads(child.stdout.strip().splitlines()[-1]))
    rows = {r["rows"] for side_runs in runs.values() for r in side_runs}
    if len(rows) != 1:
        raise SystemExit(f"the runs counted different rows: {rows}")
    taken = {side: [round(r["seconds"], 2) for r in rs] for side, rs in runs.items()}
    spread = {
        side: {"median": statistics.median(t), "min": min(t), "max": max(t), "all": t} for side, t in taken.items()
    }
    figure = {
        "files": len(files),
        "mb": round(data.size_bytes(files) / 2**20, 1),
        "rows_counted": rows.pop(),
        "seconds": spread,
        "foreach_batch_reads_an_executed_rdd": all(
            r["foreach_batch_reads_an_executed_rdd"] for r in runs["foreach_batch"]
        ),
        "foreach_batch_minus_delta_sink_per_pair": [
            round(a - b, 2) for a, b in zip(taken["foreach_batch"], taken["delta_sink"], strict=True)
        ],
    }
    out = REPO / "bench" / "results-sink.json"
    out.write_text(json.dumps(figure, indent=2) + "\n")
    print(json.dumps(figure, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
