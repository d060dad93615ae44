"""Benchmark data: one pool of landed activity files per scale, and lakes whose history is built from it.

The pool is generated once (`.cache/bench/pool-<scale>/`) and hard-linked into each lake's landing folder, so
every side of a comparison reads the very same bytes. A lake's history is built by several scheduled-style runs
(not one big run), so Delta logs, checkpoints and the file source's seen-files log grow as they would in use.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from millpond.dev.sample_data import activity_files

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bench"
LANDING = Path("landing") / "activity"


@dataclass(frozen=True)
class Scale:
    """`unit_files` files are one increment (1x history, and the 1 % of new data after 100x); 100x is 100 units."""

    rows_per_file: int
    unit_files: int
    history_runs: int  # runs that build the 100x history (the 1x history takes one)
    b3_files: int  # files of the ingest comparisons (B3, B4), read from a fresh lake
    repeats: int
    # B3's two sides are single cold JVM runs whose spread (about 8 % either way) is as wide as its margin to the
    # goal: more alternating pairs give a steadier median.
    b3_repeats: int
    b8_repeats: int  # B8's repeats per mode: each is a first run over the 100x history, an increment, an idle run

    @property
    def pool_files(self) -> int:
        return 101 * self.unit_files  # 100x history + one increment


SCALES = {
    "tiny": Scale(
        rows_per_file=200, unit_files=1, history_runs=2, b3_files=4, repeats=1, b3_repeats=1, b8_repeats=1
    ),  # harness smoke (make test)
    "small": Scale(
        rows_per_file=1000, unit_files=3, history_runs=4, b3_files=30, repeats=3, b3_repeats=3, b8_repeats=2
    ),
    # 11 runs, not 10: Delta writes a checkpoint with every 10th commit of a table, and after 10 runs the measured
    # run was every 100x table's 10th (silver's 20th), so B1 and B2 timed a run writing five checkpoints against a
    # 1x run writing none. A schedule pays that once per 10 runs; B1 now compares two runs that write none.
    "large": Scale(
        rows_per_file=6000, unit_files=11, history_runs=11, b3_files=200, repeats=3, b3_repeats=5, b8_repeats=2
    ),  # 100x = 1.1 GB
}


def pool(scale_name: str) -> list[Path]:
    """The scale's landed files, oldest first, generated on first use (1 % duplicates, 0.1 % malformed lines)."""
    scale = SCALES[scale_name]
    folder = CACHE / f"pool-{scale_name}"
    marker = folder / "pool.json"
    # What shapes the files, not how often they are measured.
    wanted = json.dumps({"rows_per_file": scale.rows_per_file, "pool_files": scale.pool_files, "generator": 1})
    if not (marker.exists() and marker.read_text() == wanted):
        shutil.rmtree(folder, ignore_errors=True)
        for start in range(0, scale.pool_files, 100):
            count = min(100, scale.pool_files - start)
            activity_files(
                folder, count, scale.rows_per_file, duplicates=0.01, malformed=0.001, seed=start, start_index=start
            )
        marker.write_text(wanted)
    return sorted(folder.glob("activity-*.json"))


def land(lake: Path, files: list[Path]) -> None:
    """Hard-link pool files into the lake's landing folder (same bytes, no copy; mtimes kept)."""
    target = lake / LANDING
    target.mkdir(parents=True, exist_ok=True)
    for f in files:
        os.link(f, target / f.name)


def size_bytes(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def build_lake(lake: Path, files: list[Path], runs: int) -> None:
    """A lake whose tables hold `files`, landed and run in `runs` rounds (one warm JVM, like an hourly schedule).

    Saved as a hard-linked snapshot (nothing in a lake is modified in place) for `restore_lake`. A snapshot built
    from the same rounds by the same millpond code is reused (the 1 GB history takes ~15 min to build).
    """
    rounds = [files[i * len(files) // runs : (i + 1) * len(files) // runs] for i in range(runs)]
    built_by = json.dumps({"rounds": [[str(f) for f in r] for r in rounds], "code": code_digest()})
    marker = lake.parent / f"{lake.name}.built.json"
    if _snapshot(lake).is_dir() and marker.exists() and marker.read_text() == built_by:
        return
    marker.unlink(missing_ok=True)
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    manifest = lake.parent / f"{lake.name}.rounds.json"
    manifest.write_text(json.dumps([[str(f) for f in r] for r in rounds]))
    subprocess.run(
        [sys.executable, "-m", "bench.jobs.history", str(lake), str(manifest)],
        cwd=REPO,
        check=True,
        env={**os.environ, "MILLPOND_LAKE": str(lake)},
    )
    shutil.rmtree(_snapshot(lake), ignore_errors=True)
    subprocess.run(["cp", "-a", "-l", str(lake), str(_snapshot(lake))], check=True)
    marker.write_text(built_by)


def code_digest() -> str:
    """The millpond code a history was built with: its Python sources under millpond/ and spark_jobs/."""
    digest = hashlib.sha256()
    for file in sorted([*(REPO / "millpond").rglob("*.py"), *(REPO / "spark_jobs").rglob("*.py")]):
        digest.update(file.relative_to(REPO).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def restore_lake(lake: Path) -> None:
    """Put the lake back as `build_lake` left it, in the same place: checkpoints hold absolute file paths, so a
    copy elsewhere would not be the same lake (Spark re-reads the last batch's files by path on restart)."""
    snapshot = _snapshot(lake)
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    for entry in snapshot.iterdir():
        link = ["-l"] if entry.name == "landing" else []  # landed files are never modified: hard-link them
        subprocess.run(["cp", "-a", *link, str(entry), str(lake / entry.name)], check=True)


def _snapshot(lake: Path) -> Path:
    return lake.parent / f"{lake.name}.snapshot"
