"""SIGKILL a real `millpond run --reprocess` at each of its commit points, then rerun (a reprocess, or a plain
scheduled run, which finishes the unfinished reprocess first): every table equals the plain-Python reference over
the landing files as they are now, and later files are ingested exactly once.

Every killed run is a process of its own; so is the first case's rerun, which recovers from its kills. The runs that
set the lake up, and the later cases' reruns, run on the test worker's session."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from millpond.dev.sample_data import SECONDS_PER_FILE, activity_files
from millpond.lake import pending_reprocess
from tests.support.lake_tables import assert_matches_reference
from tests.support.redelivery import move_event_time
from tests.support.reference import activity_reference
from tests.support.stress import assert_nothing_left, communicate_or_dump, run_in_process, start_run

pytestmark = pytest.mark.integration

HOUR_1 = ("--reprocess", "2026-11-01T01:00:00Z/2026-11-01T02:00:00Z")
FILES_PER_HOUR = 3600 // SECONDS_PER_FILE


def run(lake: Path, fault: str | None = None, args: tuple[str, ...] = HOUR_1) -> None:
    proc = start_run(lake, fault, args)
    out, _ = communicate_or_dump(proc, timeout=600)
    if fault:
        assert proc.returncode == -signal.SIGKILL, (
            f"expected a SIGKILL at {fault}, got {proc.returncode}:\n{failure_lines(out)}"
        )
        assert_nothing_left(proc)
    else:
        assert proc.returncode == 0, failure_lines(out)


def failure_lines(out: str) -> str:
    """A failed run's own words: millpond's lines and the errors' first lines, not the JVM's stack frames nor GX's
    start-up chatter (its registration notes and deprecation warnings; an error of GX's own is kept)."""
    noise = ("_docs_decorators", "DeprecationWarning", "[py.warnings]", "import sre_")
    lines = [
        ln
        for ln in out.splitlines()
        if not ln.lstrip().startswith(("at ", "...")) and not any(part in ln for part in noise)
    ]
    return "\n".join(lines)[-6000:]


def redeliver_hour_1(landing: Path, seed: int) -> None:
    """Hour 1's files anew, one record of the first corrected into hour 0: its file is replaced whole, and the run
    that finishes a killed reprocess rebuilds hour 0 downstream from the pending record (bronze no longer shows the
    move). The next round's file puts that record back into hour 1, so the row of hour 0 must go again."""
    landed = activity_files(
        landing, FILES_PER_HOUR, 50, duplicates=0.1, malformed=0.05, seed=seed, start_index=FILES_PER_HOUR
    )
    move_event_time(landed[0], 0, "2026-11-01T00:20:00.000Z")


# Each case: the faults that kill the reprocess in turn, then the rerun that finishes it.
CASES = [
    (("bronze.activity:before_replace", "bronze.activity:between_replaces"), HOUR_1),
    (("bronze.activity:after_replace", "silver.activity:before_replace"), ()),  # a plain run finishes it
    (("silver.activity:after_replace", "gold.device_counts:after_write"), ()),
]


def test_killed_reprocesses_rerun_equal_the_reference(spark, lake):
    """One lake through every case in turn: a case's kills and rerun start from the tables the previous case left, as
    a schedule's would. With each case hour 1 is re-delivered anew and a new file lands, so each case's reference
    also holds that the killed runs and the rerun ingested the new file exactly once."""
    landing = lake / "landing" / "activity"
    activity_files(landing, 4 * FILES_PER_HOUR, 50, duplicates=0.05, malformed=0.02, seed=1)
    run_in_process()
    for case, (faults, rerun) in enumerate(CASES):
        redeliver_hour_1(landing, seed=5 + case)
        if case == 0:  # and a row of a file of hour 2, which held no row of hour 1, corrected into hour 1
            move_event_time(landing / f"activity-{2 * FILES_PER_HOUR:06d}.json", 0, "2026-11-01T01:50:00.000Z")
        activity_files(landing, 1, 50, seed=20 + case, start_index=4 * FILES_PER_HOUR + case)
        for fault in faults:
            run(lake, fault)
        assert pending_reprocess.pending("activity"), faults  # recorded before the first replacement
        if case == 0:
            run(lake, args=rerun)
        else:
            run_in_process(*rerun)
        assert_matches_reference(spark, activity_reference(landing))
        assert not pending_reprocess.pending("activity"), faults
    activity_files(landing, 2, 50, seed=9, start_index=4 * FILES_PER_HOUR + len(CASES))
    run_in_process()
    assert_matches_reference(spark, activity_reference(landing))
