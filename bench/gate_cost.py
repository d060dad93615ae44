"""Gate cost vs table size: validate the same increment on top of a table N and 10·N rows big.

Writes one JSON figure (bench/results-gate.json, not committed). Not a timed test: the claim is that the gate
validates the increment only, so its cost follows the batch, not the table. Usage:

    .venv/bin/python bench/gate_cost.py [--base-files 5] [--rows 2000] [--increment-rows 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def one_size(files: int, rows: int, increment_rows: int, seed: int) -> dict:
    from millpond.dev.sample_data import activity_files
    from millpond.driver import runner
    from millpond.runs import reports

    lake = Path(tempfile.mkdtemp(prefix="millpond-gate-bench-"))
    os.environ["MILLPOND_LAKE"] = str(lake)
    try:
        landing = lake / "landing" / "activity"
        activity_files(landing, files, rows, seed=seed)
        assert runner.main(["activity", "--run-id", "build"]) == 0
        activity_files(landing, 1, increment_rows, seed=seed + 1)
        started = time.perf_counter()
        assert runner.main(["activity", "--run-id", "increment", "--layers", "bronze,silver"]) == 0
        wall = time.perf_counter() - started
        validated = [e for e in reports.history() if e["run_id"] == "increment"]
        from millpond.lake import paths
        from millpond.lake.delta_log import table_state

        return {
            "silver_rows_before": files * rows,
            "silver_rows_after": table_state(paths.table_path("silver.activity")).rows,
            "increment_rows_validated": sum(e["element_count"] for e in validated),
            "gate_seconds": round(sum(e["seconds"] for e in validated), 2),
            "bronze_silver_run_seconds": round(wall, 2),
        }
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-files", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--increment-rows", type=int, default=2000)
    parser.add_argument("--out", default=str(REPO / "bench" / "results-gate.json"))
    args = parser.parse_args()
    from millpond.driver.session import build_spark_session

    build_spark_session("millpond-gate-bench")  # one warm JVM for both sizes; the runner joins it
    one_size(1, 200, 200, seed=99)  # warm-up (JIT, GX import): not reported
    small = one_size(args.base_files, args.rows, args.increment_rows, seed=1)
    large = one_size(10 * args.base_files, args.rows, args.increment_rows, seed=1)
    figure = {
        "what": "seconds the data-quality gate spends validating the same-size increment, table 1x vs 10x",
        "table_1x": small,
        "table_10x": large,
        "gate_seconds_ratio_10x_over_1x": round(large["gate_seconds"] / max(small["gate_seconds"], 1e-9), 2),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    Path(args.out).write_text(json.dumps(figure, indent=2) + "\n")
    print(json.dumps(figure, indent=2))
    print(f"figure written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
