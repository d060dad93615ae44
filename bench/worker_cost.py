"""What one `foreachBatch` query costs on the engine before any work: the floor under a warm run (B8, B2).

Spark Connect runs a query's `foreachBatch` function in a Python worker of its own, started for that query with the
daemon off (pyspark's StreamingPythonRunner), so every query of every run pays a Python start and the imports its
function needs. This starts an engine (`millpond engine start`) on an empty lake and times queries over a one-line
file whose batch only counts, alternating three functions: one that imports nothing, one that imports millpond's
sinks (what a run's batch function unpickles), and one that also imports Great Expectations (what a gated table's
batch imports for its gate); and, as the control, the same query into Spark's `noop` sink, with no Python worker.
Writes bench/results-worker.json (not committed). Usage:

    .venv/bin/python bench/worker_cost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MILLPOND = str(Path(sys.executable).parent / "millpond")


def counts(batch, batch_id: int) -> None:
    batch.count()


def imports_sinks(batch, batch_id: int) -> None:
    import millpond.driver.sinks  # noqa: F401 - the import is what is measured

    batch.count()


def imports_gx(batch, batch_id: int) -> None:
    import great_expectations  # noqa: F401 - the import is what is measured

    import millpond.driver.sinks  # noqa: F401

    batch.count()


# None: the control, the same query into Spark's `noop` sink, which starts no Python worker.
FUNCTIONS = {
    "no foreachBatch (noop sink)": None,
    "nothing imported": counts,
    "millpond's sinks": imports_sinks,
    "sinks and great_expectations": imports_gx,
}


def measure(remote: str, repeats: int, work: Path) -> dict[str, list[float]]:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).getOrCreate()
    source = work / "in"
    source.mkdir()
    (source / "one.txt").write_text("x\n")
    seconds: dict[str, list[float]] = {name: [] for name in FUNCTIONS}
    for rep in range(repeats):
        order = list(FUNCTIONS.items()) if rep % 2 == 0 else list(reversed(FUNCTIONS.items()))
        for name, function in order:
            started = time.perf_counter()
            writer = spark.readStream.format("text").load(str(source)).writeStream
            writer = writer.format("noop") if function is None else writer.foreachBatch(function)
            query = (
                writer.option("checkpointLocation", str(work / f"checkpoint-{rep}-{list(FUNCTIONS).index(name)}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            seconds[name].append(round(time.perf_counter() - started, 2))
    spark.stop()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results-worker.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="millpond-worker-bench-"))
    env = {**os.environ, "MILLPOND_LAKE": str(work / "lake")}
    try:
        started = subprocess.run([MILLPOND, "engine", "start"], env=env, capture_output=True, text=True, check=True)
        remote = started.stdout.strip().splitlines()[-1]
        try:
            seconds = measure(remote, args.repeats, work)
        finally:
            subprocess.run([MILLPOND, "engine", "stop"], env=env, capture_output=True, check=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "what": "wall seconds of an availableNow query on the engine over a one-line file: into the noop sink (no "
        "Python worker), or through a foreachBatch that counts, by what its function imports; the server's first "
        "query is in the first repeat",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "load_average": os.getloadavg()},
        "seconds": seconds,
        "median_after_the_first_repeat": {name: round(statistics.median(s[1:] or s), 2) for name, s in seconds.items()},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median_after_the_first_repeat"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
