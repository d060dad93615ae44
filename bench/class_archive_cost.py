"""What the class-data archive (millpond.driver.class_archive, `MILLPOND_CLASS_ARCHIVE`) buys a run with a JVM of its
own: the same small increments of the activity pipeline, `millpond run` with the archive and without, sides
alternating, each side in a lake of its own that receives the very same landed files. Every side's tables are
checked against the plain-Python reference (bench/check.py) after each run, before its time is kept.

Needs the archive built (`make setup` runs `millpond class-archive`). Writes bench/results-class-archive.json (not
committed). Usage:

    .venv/bin/python bench/class_archive_cost.py [--repeats 5]
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
SIDES = {"archive": "on", "no archive": "off"}


def run(lake: Path, archive: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env |= {"MILLPOND_LAKE": str(lake), "MILLPOND_CLASS_ARCHIVE": archive}
    started = time.perf_counter()
    done = subprocess.run([MILLPOND, "run", "activity"], env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"millpond run ({archive}) exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    return seconds, done.stdout


def main() -> int:
    from bench.check import check, millpond_tables
    from millpond.dev.sample_data import activity_files
    from millpond.driver.class_archive import archive_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results-class-archive.json"))
    args = parser.parse_args()
    archive = archive_path()
    if archive is None or not archive.is_file():
        print("no class-data archive for this JVM: run `make setup` (or `millpond class-archive`) first")
        return 2
    work = Path(tempfile.mkdtemp(prefix="millpond-archive-bench-"))
    lakes = {side: work / side.replace(" ", "-") for side in SIDES}
    source = work / "files"
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        for rep in range(args.repeats + 1):  # the first run of each lake builds its tables: not kept
            landed = activity_files(source, 1, 300, duplicates=0.03, malformed=0.01, seed=rep)
            for lake in lakes.values():
                (lake / "landing" / "activity").mkdir(parents=True, exist_ok=True)
                for file in landed:
                    os.link(file, lake / "landing" / "activity" / file.name)
            order = list(SIDES.items()) if rep % 2 == 0 else list(reversed(SIDES.items()))
            for side, setting in order:
                took, said = run(lakes[side], setting)
                expected = f"millpond: class archive {archive if setting == 'on' else 'none'}\n"
                if expected not in said:
                    raise RuntimeError(f"{side}: the run did not say {expected!r}:\n{said[-2000:]}")
                check(side, lakes[side] / "landing" / "activity", dict(millpond_tables(lakes[side])))
                if rep:
                    seconds[side].append(round(took, 2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {side: statistics.median(s) for side, s in seconds.items()}
    result = {
        "what": "wall seconds of `millpond run activity` on a 300-line increment, a JVM per run, with the class-data "
        "archive and without; each side's tables equal the reference after every run",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "load_average": os.getloadavg()},
        "seconds": seconds,
        "median": medians,
        "ratio_archive_to_none": round(medians["archive"] / medians["no archive"], 3),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median", "ratio_archive_to_none")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
