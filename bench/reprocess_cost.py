"""What a source's `layout` saves a reprocess: one hour rebuilt on two lakes with the same history, one whose landing
files lie in `date=YYYY-MM-DD/hour=HH` folders (the reprocess reads that hour's folder) and one flat (it reads every
file the stream has read), alternating sides, each run its own `millpond run --reprocess` process.

Before any figure is written, both lakes' tables are checked against the plain-Python reference over their landing
files. Writes bench/results-reprocess.json (not committed). Not a timed test. Usage:

    .venv/bin/python bench/reprocess_cost.py [--hours 48] [--rows 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.probe import measure, spread  # noqa: E402

MILLPOND = str(Path(sys.executable).parent / "millpond")

FILES_PER_HOUR = 12  # millpond.dev.sample_data: each file covers five minutes


def land(lake: Path, hours: int, rows: int, layout: bool, seed_offset: int = 0, only_hour: int | None = None) -> None:
    from millpond.dev.sample_data import activity_files

    landing = lake / "landing" / "activity"
    for hour in range(hours) if only_hour is None else [only_hour]:
        day, clock = divmod(hour, 24)
        folder = landing / f"date=2026-11-{1 + day:02d}" / f"hour={clock:02d}" if layout else landing
        activity_files(
            folder,
            FILES_PER_HOUR,
            rows,
            duplicates=0.05,
            malformed=0.01,
            seed=hour + seed_offset,
            start_index=hour * FILES_PER_HOUR,
        )


def check(lake: Path, layout: bool) -> None:
    """Each table against the reference over the lake's landing files (in a process of its own)."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]);"
        "from millpond.driver.session import build_spark_session;"
        "from tests.support.lake_tables import assert_matches_reference;"
        "from tests.support.reference import activity_reference;"
        "spark = build_spark_session('bench-check');"
        "assert_matches_reference(spark, activity_reference(Path(sys.argv[1]) / 'landing' / 'activity', "
        "recursive=sys.argv[3] == '1'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(lake), str(REPO), "1" if layout else "0"],
        env={**os.environ, "MILLPOND_LAKE": str(lake)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{lake}: the tables differ from the reference:\n{done.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=48, help="hours of landed history")
    parser.add_argument("--rows", type=int, default=100, help="rows per file (12 files per hour)")
    parser.add_argument("--repeats", type=int, default=3, help="timed reprocesses per side")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="millpond-reprocess-"))
    spec = (REPO / "pipelines" / "activity.yaml").read_text()
    specs = {"layout": work / "layout" / "activity.yaml", "flat": REPO / "pipelines" / "activity.yaml"}
    specs["layout"].parent.mkdir()
    specs["layout"].write_text(
        spec.replace("event_time: Recorded_At", "event_time: Recorded_At\n    layout: date=YYYY-MM-DD/hour=HH")
    )
    lakes = {side: work / f"lake-{side}" for side in specs}
    for side, lake in lakes.items():
        land(lake, args.hours, args.rows, side == "layout")
        first = measure([MILLPOND, "run", str(specs[side])], env={"MILLPOND_LAKE": str(lake)})
        if "succeeded" not in first.output:
            raise SystemExit(first.output[-3000:])
    hour = args.hours // 2
    interval = f"2026-11-{1 + hour // 24:02d}T{hour % 24:02d}:00:00Z/2026-11-{1 + (hour + 1) // 24:02d}T{(hour + 1) % 24:02d}:00:00Z"
    timed: dict[str, list[float]] = {side: [] for side in specs}
    for k in range(args.repeats):
        for side in specs if k % 2 == 0 else reversed(list(specs)):
            land(lakes[side], args.hours, args.rows, side == "layout", seed_offset=1000 + k, only_hour=hour)
            run = measure(
                [MILLPOND, "run", str(specs[side]), "--reprocess", interval],
                env={"MILLPOND_LAKE": str(lakes[side])},
            )
            if "succeeded" not in run.output:
                raise SystemExit(run.output[-3000:])
            timed[side].append(run.wall)
    for side, lake in lakes.items():
        check(lake, side == "layout")
    files = args.hours * FILES_PER_HOUR
    result = {
        "what": f"reprocess one hour of {args.hours} ({files} files of {args.rows} rows); layout reads "
        f"{FILES_PER_HOUR} files, flat reads {files}",
        "layout_seconds": spread(timed["layout"]),
        "flat_seconds": spread(timed["flat"]),
        "flat_over_layout": round(spread(timed["flat"])["median"] / spread(timed["layout"])["median"], 2),
        "machine": f"{os.cpu_count()} cores",
    }
    (REPO / "bench" / "results-reprocess.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
