"""How long `millpond backlog` (millpond.lake.backlog, no JVM) takes with 10,000 files waiting, on a lake whose
bronze checkpoint already logged thousands of files, as a long-running pipeline's has.

A lake gets `--read` one-line activity files and a real `millpond run` (a JVM of its own) reads them; then
`--waiting` more files land, and `millpond backlog activity --json` runs `--repeats` times, each a process of its
own as a user or the DAG starts it. Before any time is kept, the command's answer is checked against the landing
folder itself: the waiting files' count and byte total. Writes bench/results-backlog.json (not committed). Usage:

    .venv/bin/python bench/backlog_cost.py [--read 2000] [--waiting 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MILLPOND = str(Path(sys.executable).parent / "millpond")


def land(folder: Path, first: int, count: int) -> int:
    """`count` activity files of one line each (the sample generator's, landed whole); their byte total."""
    from millpond.dev.sample_data import activity_files

    return sum(p.stat().st_size for p in activity_files(folder, count, 1, seed=first, start_index=first))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--read", type=int, default=2000, help="files the run reads first (the checkpoint's log)")
    parser.add_argument("--waiting", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="millpond-bench-backlog-") as work:
        lake = Path(work) / "lake"
        env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"} | {"MILLPOND_LAKE": str(lake)}
        landing = lake / "landing" / "activity"
        land(landing, 0, args.read)
        done = subprocess.run(
            [MILLPOND, "run", "activity", "--layers", "bronze"], env=env, capture_output=True, text=True, timeout=1800
        )
        if done.returncode != 0:
            raise RuntimeError(f"millpond run exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
        waiting_bytes = land(landing, args.read, args.waiting)
        seconds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            answer = subprocess.run(
                [MILLPOND, "backlog", "activity", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            seconds.append(time.perf_counter() - started)
            bronze = next(w for w in json.loads(answer.stdout) if w["table"] == "bronze.activity")
            if (bronze["files"], bronze["bytes"]) != (args.waiting, waiting_bytes):
                raise RuntimeError(f"backlog said {bronze}, landing holds {args.waiting} files, {waiting_bytes} bytes")
        logged = sorted(
            p.name for p in (lake / "_checkpoints" / "activity" / "bronze.activity" / "sources" / "0").iterdir()
        )
    result = {
        "what": "millpond backlog activity --json, a process each time, files waiting beside a logged checkpoint",
        "read_first": args.read,
        "waiting": args.waiting,
        "seen_log_files": logged,
        "seconds": {
            "median": round(statistics.median(seconds), 3),
            "min": round(min(seconds), 3),
            "max": round(max(seconds), 3),
            "n": len(seconds),
        },
        "checked_against_landing": True,
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = REPO / "bench" / "results-backlog.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["seconds"]), f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
