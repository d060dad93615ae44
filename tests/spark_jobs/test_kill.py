"""SIGKILL a real `millpond run` at the points that matter, rerun, and compare with the plain-Python reference.

Points (MILLPOND_FAULT, the process kills itself with SIGKILL exactly there):
  before_write    offsets logged for the batch, nothing written to Delta yet
  between_writes  bronze rows committed, quarantine rows not yet
  after_write     Delta committed, Spark's commit log not yet: the replay must be skipped by txnVersion
  gold            killed inside the complete-mode gold write
plus a SIGKILL of the whole process group at a random moment (seeded).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from millpond.generate import activity_files
from tests.lake_tables import assert_matches_reference
from tests.reference import activity_reference
from tests.stress import assert_nothing_left, start_run

pytestmark = pytest.mark.integration


def run_killed_at(lake: Path, fault: str) -> None:
    proc = start_run(lake, fault)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, f"expected a SIGKILL at {fault}, got {proc.returncode}:\n{out[-3000:]}"
    assert_nothing_left(proc)


def test_killed_runs_then_rerun_equal_the_reference(spark, lake):
    landing = lake / "landing" / "activity"
    rng = random.Random(20261122)

    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=1)
    run_killed_at(lake, "bronze.activity:before_write")
    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=2)
    run_killed_at(lake, "bronze.activity:between_writes")  # the replayed first batch, half written
    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=3)
    run_killed_at(lake, "bronze.activity:after_write")
    run_killed_at(lake, "silver.activity:after_write")
    run_killed_at(lake, "gold.device_counts:after_write")
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=4)
    proc = start_run(lake)
    time.sleep(rng.uniform(4, 12))  # somewhere in JVM start, bronze or silver
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert_nothing_left(proc)

    final = start_run(lake)
    out, _ = final.communicate(timeout=600)
    assert final.returncode == 0, out[-3000:]
    assert_matches_reference(spark, activity_reference(landing))
