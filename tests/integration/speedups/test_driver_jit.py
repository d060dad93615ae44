"""The driver JIT a run picks: C1 only for a small increment, the default JIT for a full refresh or a big or unknown
input, sized from real checkpoints; and the JVM a `millpond run` starts really runs with it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from millpond.dev.sample_data import activity_files
from millpond.driver import driver_jit, runner
from millpond.lake import paths
from millpond.spec import SpecError, load_pipeline

pytestmark = pytest.mark.integration

BRONZE, SILVER, GOLD = "bronze.activity", "silver.activity", "gold.device_counts"


def land(lake, files, seed):
    return activity_files(lake / "landing" / "activity", files, 300, seed=seed)


def test_pending_input_is_what_each_checkpoint_has_not_read_yet(spark, lake):
    pipeline = load_pipeline("activity")
    first = land(lake, 2, seed=1)
    assert driver_jit.pending_input_bytes(pipeline, [BRONZE]) == sum(f.stat().st_size for f in first)
    assert driver_jit.pending_input_bytes(pipeline, list(pipeline.tables)) == sum(f.stat().st_size for f in first)
    assert driver_jit.pending_input_bytes(pipeline, [SILVER]) is None  # no checkpoint yet: it reads all of bronze

    assert runner.main(["activity", "--run-id", "r1"]) == 0
    assert driver_jit.pending_input_bytes(pipeline, list(pipeline.tables)) == 0
    assert driver_jit.pending_input_bytes(pipeline, [SILVER]) == 0

    newer = land(lake, 1, seed=2)
    assert driver_jit.pending_input_bytes(pipeline, [BRONZE]) == newer[0].stat().st_size
    assert runner.main(["activity", "--run-id", "r2", "--tables", BRONZE]) == 0
    # Silver's input is now bronze's new commit: its data files, however many bytes Delta wrote for them.
    commit = paths.table_path(BRONZE) / "_delta_log" / "00000000000000000001.json"
    assert '"add"' in commit.read_text()
    assert driver_jit.pending_input_bytes(pipeline, [SILVER]) > 0
    assert driver_jit.pending_input_bytes(pipeline, [SILVER, GOLD]) == driver_jit.pending_input_bytes(
        pipeline, [SILVER]
    )
    assert driver_jit.choose(pipeline, [SILVER, GOLD], full_refresh=False).mode == "quick"

    # A big landing (a sparse file: sized, never read here) gets the default JIT, and says why.
    big = lake / "landing" / "activity" / "activity-big.json"
    with open(big, "wb") as f:
        f.truncate(driver_jit.QUICK_MAX_BYTES + 1)
    chosen = driver_jit.choose(pipeline, [BRONZE], full_refresh=False)
    assert (chosen.mode, chosen.java_options) == ("full", driver_jit.HUGE_METHODS_OPTIONS)
    assert "32.0 MB of new input > 32 MB" in chosen.reason
    big.unlink()
    assert driver_jit.choose(pipeline, [BRONZE], full_refresh=True).mode == "full"


def test_kafka_input_is_not_sized_and_the_mode_can_be_forced(lake, monkeypatch):
    kafka = load_pipeline("device_status")
    entry = [t for t, table in kafka.tables.items() if table.reads_kafka]
    assert entry and driver_jit.pending_input_bytes(kafka, entry) is None
    assert driver_jit.choose(kafka, entry, full_refresh=False).mode == "full"
    monkeypatch.setenv(driver_jit.ENV, "quick")
    assert driver_jit.QUICK_OPTIONS in driver_jit.choose(kafka, entry, full_refresh=False).java_options.split()
    monkeypatch.setenv(driver_jit.ENV, "fast")
    with pytest.raises(SpecError, match="MILLPOND_DRIVER_JIT='fast' is not a JIT mode. Fix: set it to auto"):
        driver_jit.choose(kafka, entry, full_refresh=False)
    assert runner.main(["activity"]) == 2  # refused before the lock and the JVM


@pytest.mark.own_jvm
def test_millpond_run_starts_a_c1_only_driver_for_an_increment_and_the_default_jit_for_a_full_refresh(lake):
    landed = land(lake, 2, seed=3)
    megabytes = sum(f.stat().st_size for f in landed) / 2**20
    env = {**os.environ, "MILLPOND_LAKE": str(lake)}
    env.pop(driver_jit.ENV, None)
    small = subprocess.run(
        [sys.executable, "-m", "millpond.cli", "run", "activity"], env=env, capture_output=True, text=True, timeout=600
    )
    assert small.returncode == 0, small.stderr[-3000:]
    # The line reads the JVM's own input arguments, so it says what the JVM runs, not what was asked for.
    line = f"millpond: driver JIT quick (C1 only, methods of any size): {megabytes:.1f} MB of new input <= 32 MB"
    assert line in small.stdout, small.stdout[-3000:]
    full = subprocess.run(
        [sys.executable, "-m", "millpond.cli", "run", "activity", "--full-refresh", BRONZE],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert full.returncode == 0, full.stderr[-3000:]
    assert (
        "millpond: driver JIT full (tiered C1 + C2, methods of any size): a full refresh rereads every landed file"
    ) in full.stdout
