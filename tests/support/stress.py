"""Seeded crash stress: land files, start `millpond run`, SIGKILL it somewhere, repeat; the tables stay exact.

    python -m tests.support.stress --cycles 30 --seed 1    (what `make stress` runs; `make test` runs 3 cycles)

Each cycle lands 0-2 new files (duplicates and malformed lines included), starts a real `millpond run activity`
in its own session and kills it at a point drawn from the seed: a fault point inside the write path of any
table (MILLPOND_FAULT: before the Delta write, between a table and its quarantine, after the Delta commit but
before Spark's commit log, after a table finished), or a SIGKILL of the whole process group at a random moment.
A run the fault did not reach (no new data for that table) finishes normally. After every finished run, and at
the end, the tables are compared with the plain-Python reference: counts, every key, every gold value.

Also reported, for the resource-bound claims: each finished run's peak RSS (driver + JVM) and the checkpoint's
file count per table, which must stay bounded while the history grows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil

from millpond.dev.sample_data import activity_files
from millpond.lake import paths

MILLPOND = str(Path(sys.executable).parent / "millpond")
TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")
FAULT_POINTS = [
    *(f"{t}:{p}" for t in TABLES for p in ("before_write", "after_write", "after_table")),
    "bronze.activity:between_writes",  # bronze committed, its quarantine not yet
    "random",
    "random",
    "random",  # a SIGKILL of the process group at any moment, as often as the named points
]


def start_run(lake: Path, fault: str | None = None, args: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {**os.environ, "MILLPOND_LAKE": str(lake)}
    env.pop("MILLPOND_FAULT", None)
    if fault:
        env["MILLPOND_FAULT"] = fault
    return subprocess.Popen(
        [MILLPOND, "run", "activity", *args],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def communicate_or_dump(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """proc's (stdout, stderr) once it ends. One still running after `timeout` seconds is asked where it is first (a
    `millpond run` prints its threads' Python stacks on SIGUSR1: runner.dump_stacks_on_sigusr1), then killed with
    its group, and the test fails with that output's end: a hang names its place."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
        if os.getsid(proc.pid) == proc.pid:  # a session of its own (start_run): its JVM goes too
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"{' '.join(map(str, proc.args))} still ran after {timeout:.0f} s; where it was:\n{(out or '')[-4000:]}"
            f"\n{(err or '')[-6000:]}"
        ) from None
    return out or "", err or ""


def run_in_process(*args: str, pipeline: str = "activity") -> None:
    """A run on this test worker's Spark session (its lake from MILLPOND_LAKE): where a run is not the process under
    test, a rerun after a kill or a run that sets a lake up, it needs no JVM of its own (docs/testing.md)."""
    from millpond.driver import runner

    assert runner.main([pipeline, *args]) == 0, f"the in-process run of {pipeline} {' '.join(args)} failed"


def session_processes(proc: subprocess.Popen) -> list[psutil.Process]:
    alive = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == proc.pid:
                alive.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return alive


def assert_nothing_left(proc: subprocess.Popen) -> None:
    """The driver's JVM dies with it: nothing of the killed run may keep running (or holding the lake)."""
    deadline = time.monotonic() + 20
    while session_processes(proc) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert session_processes(proc) == [], "processes of the killed run are still alive"


def watch(proc: subprocess.Popen, kill_after: float | None, timeout: float = 900) -> tuple[int, int, str]:
    """Wait for the run (SIGKILLing its process group after `kill_after` s); return (exit code, peak RSS, output)."""
    started, peak = time.monotonic(), 0
    while proc.poll() is None:
        elapsed = time.monotonic() - started
        if kill_after is not None and elapsed >= kill_after:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        if elapsed > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TimeoutError(f"run did not finish in {timeout} s")
        peak = max(peak, sum(_rss(p) for p in session_processes(proc)))
        time.sleep(0.25)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, peak, out


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def checkpoint_files(table_id: str) -> int:
    return sum(len(files) for _, _, files in os.walk(paths.checkpoint_path("activity", table_id)))


class Stress:
    def __init__(self, lake: Path, seed: int, spark):
        self.lake, self.spark, self.rng = lake, spark, random.Random(seed)
        self.landing = lake / "landing" / "activity"
        self.kills: Counter[str] = Counter()
        self.finished = self.mismatches = self.rows_compared = self.files = 0
        self.peaks: list[int] = []
        self.typical_run = 60.0  # seconds; updated from finished runs, bounds the random kill moment
        self.problems: list[str] = []

    def land(self) -> None:
        for _ in range(self.rng.choice((0, 1, 1, 2))):
            activity_files(
                self.landing,
                1,
                self.rng.randint(100, 300),
                duplicates=0.05,
                malformed=0.02,
                seed=self.rng.randrange(1 << 30),
            )
            self.files += 1

    def cycle(self) -> None:
        self.land()
        point = self.rng.choice(FAULT_POINTS)
        kill_after = self.rng.uniform(1.0, self.typical_run) if point == "random" else None
        proc = start_run(self.lake, None if point == "random" else point)
        started = time.monotonic()
        code, peak, out = watch(proc, kill_after)
        if code == -signal.SIGKILL:
            assert_nothing_left(proc)
            self.kills[point if point != "random" else "random moment"] += 1
        elif code == 0:
            self.finished_run(time.monotonic() - started, peak)
        else:
            raise RuntimeError(f"run with fault {point} exited {code}:\n{out[-3000:]}")

    def finished_run(self, seconds: float, peak: int) -> None:
        self.finished += 1
        self.peaks.append(peak)
        self.typical_run = max(10.0, seconds)
        self.compare()

    def compare(self) -> None:
        from tests.support.lake_tables import assert_matches_reference
        from tests.support.reference import activity_reference

        reference = activity_reference(self.landing)
        try:
            assert_matches_reference(self.spark, reference)
        except AssertionError as exc:
            self.mismatches += 1
            self.problems.append(f"after {sum(self.kills.values())} kills: {exc}"[:2000])
        self.rows_compared += (
            len(reference.bronze)
            + reference.quarantined
            + len(reference.silver)
            + len(reference.device_counts)
            + len(reference.hourly)
        )

    def finish(self) -> None:
        proc = start_run(self.lake)
        code, peak, out = watch(proc, None)
        if code != 0:
            raise RuntimeError(f"the final clean run exited {code}:\n{out[-3000:]}")
        self.finished_run(0, peak)

    def figures(self, cycles: int) -> dict:
        return {
            "cycles": cycles,
            "kills": sum(self.kills.values()),
            "kills_by_point": dict(sorted(self.kills.items())),
            "finished_runs": self.finished,
            "files_landed": self.files,
            "rows_compared": self.rows_compared,
            "mismatches": self.mismatches,
            "problems": self.problems,
            "peak_rss_mb_first_last": [round(self.peaks[0] / 2**20), round(self.peaks[-1] / 2**20)]
            if self.peaks
            else [],
            "checkpoint_files": {t: checkpoint_files(t) for t in TABLES},
        }


def run_stress(lake: Path, cycles: int, seed: int, spark) -> dict:
    stress = Stress(lake, seed, spark)
    activity_files(stress.landing, 2, 300, duplicates=0.05, malformed=0.02, seed=seed)
    stress.files += 2
    for number in range(cycles):
        stress.cycle()
        print(
            f"stress: cycle {number + 1}/{cycles}: kills {sum(stress.kills.values())}, finished runs "
            f"{stress.finished}, mismatches {stress.mismatches}",
            flush=True,
        )
    stress.finish()
    return stress.figures(cycles)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lake", type=Path, default=Path(".cache/stress/lake"))
    parser.add_argument("--results", type=Path, default=Path(".cache/stress/results.json"))
    args = parser.parse_args(argv)
    import shutil

    from millpond.driver.session import build_spark_session

    lake = args.lake.resolve()
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    os.environ["MILLPOND_LAKE"] = str(lake)
    spark = build_spark_session("millpond-stress-check")
    started = time.monotonic()
    figures = run_stress(lake, args.cycles, args.seed, spark)
    figures["seed"], figures["seconds"] = args.seed, round(time.monotonic() - started)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    print(
        f"stress: {figures['cycles']} cycles, {figures['kills']} kills, {figures['rows_compared']} rows compared, "
        f"mismatches = {figures['mismatches']}; results {args.results}"
    )
    return 1 if figures["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
