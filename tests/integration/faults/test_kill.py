"""SIGKILL a real `millpond run` at the points that matter, rerun, and compare with the plain-Python reference.

Points (MILLPOND_FAULT, the process kills itself with SIGKILL exactly there):
  before_write    offsets logged for the batch, nothing written to Delta yet
  between_writes  bronze rows committed, quarantine rows not yet
  after_write     Delta committed, Spark's commit log not yet: the replay must be skipped (its commit names the batch)
  gold            killed inside the complete-mode gold write
plus a SIGKILL of the whole process group at a random moment (seeded).

The first test runs on both backends (a JVM of the run's own, the engine: tests/support/backends.py). Every killed
run is a process of its own (its death is the subject); the rerun that recovers from the first test's kills is one
too, and the other runs, which set a lake up or check a rerun, run on the test worker's session.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from millpond.runs import reports
from tests.support.backends import Backend, OwnJvm
from tests.support.backlog import backlog, committed_batch, files_read_after, run_tables
from tests.support.lake_tables import assert_matches_reference, data_commits_without_txn
from tests.support.reference import activity_reference
from tests.support.stress import assert_nothing_left, run_in_process, start_run

pytestmark = pytest.mark.integration


def run_killed_at(lake: Path, fault: str, backend: Backend | None = None) -> None:
    """A `millpond run` SIGKILLed at `fault`, on `backend` (a JVM of its own by default); once it is dead, a table
    killed before its write has no new version, and nothing more of it ever commits (on the engine: its queries
    ended in the server)."""
    backend = backend or OwnJvm()
    table = fault.split(":")[0]
    before = latest_version(paths.table_path(table))
    proc = backend.start(fault=fault)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, f"expected a SIGKILL at {fault}, got {proc.returncode}:\n{out[-3000:]}"
    assert_nothing_left(proc)
    backend.after_death()
    if fault.endswith(":before_write"):
        assert latest_version(paths.table_path(table)) == before, f"{table} committed the batch of a run killed first"


def run_to_the_end(lake: Path) -> None:
    proc = start_run(lake)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]


def test_killed_runs_then_rerun_equal_the_reference(spark, lake, backend):
    """On both backends: on the engine the fault points are reached in the server's batch worker, which SIGKILLs the
    run's own process there, and the batch must then stop before its next commit, though the server lives on."""
    landing = lake / "landing" / "activity"
    rng = random.Random(20261122)

    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=1)
    run_killed_at(lake, "bronze.activity:before_write", backend)
    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=2)
    run_killed_at(lake, "bronze.activity:between_writes", backend)  # the replayed first batch, half written
    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=3)
    run_killed_at(lake, "bronze.activity:after_write", backend)
    run_killed_at(lake, "silver.activity:after_write", backend)
    run_killed_at(lake, "gold.device_counts:after_write", backend)
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=4)
    proc = backend.start()
    time.sleep(rng.uniform(4, 12))  # somewhere in JVM start, bronze or silver
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert_nothing_left(proc)
    backend.after_death()

    rerun = backend.start()  # a fresh process recovers from every kill above
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out[-3000:]
    assert_matches_reference(spark, activity_reference(landing))
    backend.succeed()  # nothing new: a no-op run
    assert_matches_reference(spark, activity_reference(landing))
    assert data_commits_without_txn(lake) == []  # every data commit of every table carries Delta's `txn`


def test_a_replay_is_skipped_after_other_writers_committed_and_the_backlog_names_what_each_run_read(spark, lake):
    """Delta's own replay check (the `txn` action every write carries) holds past commits millpond did not make (an
    OPTIMIZE, a property change).

    Bronze and silver are killed after their Delta commit; before the rerun someone compacts bronze and tags
    silver. A write that missed the replay would duplicate bronze rows or silver keys.

    Around each run, `millpond backlog` (no JVM) is compared with what that run then read: the files bronze logged,
    the rows Spark counted into silver and gold. A killed run's planned batch counts as waiting; the OPTIMIZE and
    the property change, which add no data, do not.
    """
    landing = lake / "landing" / "activity"
    bronze, silver = paths.table_path("bronze.activity"), paths.table_path("silver.activity")
    landed = activity_files(landing, 3, 300, duplicates=0.05, malformed=0.02, seed=5)
    waiting = backlog(lake)["bronze.activity"]
    assert (waiting["files"], waiting["bytes"], waiting["batches"]) == (3, sum(f.stat().st_size for f in landed), 1)
    assert "no commit yet" in backlog(lake)["silver.activity"]["note"]
    run_in_process()
    assert [t for t, w in backlog(lake).items() if w["files"] or w["batches"]] == []
    landed = activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=6)
    waiting = backlog(lake)["bronze.activity"]
    assert (waiting["files"], waiting["bytes"], waiting["replayed_batch"]) == (1, landed[0].stat().st_size, False)

    run_killed_at(lake, "bronze.activity:after_write")
    spark.sql(f"OPTIMIZE delta.`{bronze}`")
    bronze_version = latest_version(bronze)
    waiting = backlog(lake)["bronze.activity"]
    assert (waiting["files"], waiting["replayed_batch"]) == (1, True)
    bronze_done = committed_batch("bronze.activity")
    run_killed_at(lake, "silver.activity:after_write")  # bronze's batch is replayed first in this run
    assert latest_version(bronze) == bronze_version, "the replayed bronze batch was written again"
    assert files_read_after(bronze_done) == [str(landed[0])]
    spark.sql(f"ALTER TABLE delta.`{silver}` SET TBLPROPERTIES ('team' = 'data')")

    waiting = backlog(lake)
    assert waiting["silver.activity"]["replayed_batch"] and waiting["silver.activity"]["rows"] > 0
    run_in_process("--run-id", "after-the-kills")
    read = run_tables("after-the-kills")
    for table in ("silver.activity", "gold.device_counts", "gold.activity_hourly"):
        assert waiting[table]["rows"] == read[table]["rows_in"], (
            f"{table}: backlog {waiting[table]}, read {read[table]}"
        )
        assert read[table]["backlog_rows"] == waiting[table]["rows"]  # the run recorded it before starting Spark
    assert read["bronze.activity"]["backlog_files"] == 0
    gated = [e for e in reports.history() if e["run_id"] == "after-the-kills" and e["table"] == "silver.activity"]
    assert gated and all(e["backlog"]["rows"] == waiting["silver.activity"]["rows"] for e in gated)  # the index's row
    assert_matches_reference(spark, activity_reference(landing))
    assert [t for t, w in backlog(lake).items() if w["files"] or w["batches"]] == []


def test_a_replayed_gold_overwrite_by_delta_rs_is_skipped(spark, lake):
    """Once a gold table exists, its complete-mode result is committed by delta-rs (millpond.lake.small_overwrite) with the
    batch's Delta `txn` action. A run killed right after that commit replays the batch; Delta's transaction state
    has the batch, and the replay writes nothing."""
    landing = lake / "landing" / "activity"
    gold = paths.table_path("gold.device_counts")
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=7)
    run_in_process()
    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=8)
    run_killed_at(lake, "gold.device_counts:after_write")
    newest = spark.sql(f"DESCRIBE HISTORY delta.`{gold}`").orderBy("version", ascending=False).first()
    assert newest.engineInfo.startswith("delta-rs"), newest
    newest_commit = (gold / "_delta_log" / f"{newest.version:020d}.json").read_text().splitlines()
    assert [json.loads(line)["txn"]["version"] for line in newest_commit if '"txn"' in line] == [1]
    version = latest_version(gold)

    run_in_process()
    assert latest_version(gold) == version, "the replayed gold batch was written again"
    assert_matches_reference(spark, activity_reference(landing))
