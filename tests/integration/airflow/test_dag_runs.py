"""The activity DAG through real `airflow dags test` runs (SQLite, local Spark via spark-submit).

One Airflow home and one lake for the module: each scenario builds on the previous run, as in production.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from millpond.dev.sample_data import activity_files
from millpond.lake import paths
from millpond.lake.delta_log import table_state
from millpond.lake.lock import PipelineBusy, pipeline_lock
from millpond.runs import run_summary
from tests.support.airflow_run import (
    airflow_env,
    dags_test,
    is_runner,
    migrate,
    spark_processes,
    start_dags_test,
    stop_group,
    wait_for,
)
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """An Airflow home (migrated) and a lake; MILLPOND_LAKE points this process at the lake too."""
    root = tmp_path_factory.mktemp("airflow-site")
    lake = root / "lake"
    lake.mkdir()
    env = airflow_env(root / "airflow_home", lake)
    migrate(env)
    previous = os.environ.get("MILLPOND_LAKE")
    os.environ["MILLPOND_LAKE"] = str(lake)
    yield root, lake, env
    if previous is None:
        os.environ.pop("MILLPOND_LAKE", None)
    else:
        os.environ["MILLPOND_LAKE"] = previous
    assert spark_processes(lake) == [], "a Spark process outlived the tests"


def land(lake, files, seed):
    return activity_files(lake / "landing" / "activity", files, 300, duplicates=0.05, malformed=0.01, seed=seed)


def versions() -> dict[str, int]:
    return {t: table_state(paths.table_path(t)).version for t in TABLES}


def run_id_of(log: str) -> str:
    """The Airflow run id, as the summary task printed it."""
    for line in log.splitlines():
        if line.startswith("run ") and " of pipeline activity " in line:
            return line.split()[1]
    raise AssertionError("run_summary did not print its table")


def test_dag_run_processes_landed_files_end_to_end(site, spark, test_engine):
    root, lake, env = site
    land(lake, 2, seed=1)
    rc, log = dags_test(env, "2026-11-02T05:00:00+00:00", root / "run1.log")
    assert rc == 0, log[-3000:]
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))
    run_id = run_id_of(log)
    summary = run_summary.load("activity", run_id)
    assert [t["table"] for t in summary["tables"]] == list(TABLES)
    assert all(t["outcome"] == "succeeded" for t in summary["tables"])
    assert summary["tables"][0]["rows_in"] == 600  # both files, counted per table in the summary
    if test_engine:  # `make test-engine`: every task ran on the engine, and no driver JVM of its own was started
        assert "millpond: on the engine at " in log and "driver jit" not in log.lower(), log[-3000:]
    else:  # spark-submit started the ingest task's driver JVM with C1 only (read back from the JVM by the runner);
        # gold's first run reads all of silver, which is not sized before it starts, so it keeps the default JIT.
        assert "millpond: driver JIT quick (C1 only, methods of any size): 0.1 MB of new input <= 32 MB" in log, log
        assert (
            "millpond: driver JIT full (tiered C1 + C2, methods of any size): this run's new input cannot be sized"
        ) in log, log[-3000:]
    with sqlite3.connect(root / "airflow_home" / "airflow.db") as db:  # per-table XComs of run_summary
        rows = db.execute("SELECT key FROM xcom WHERE task_id = 'run_summary' AND run_id = ?", (run_id,))
        keys = {key for (key,) in rows}
    assert keys >= set(TABLES)
    # The event log ties each table's run to the Airflow run and its data interval.
    events = spark.read.format("delta").load(str(paths.event_log_path())).where(f"run_id = '{run_id}'").collect()
    assert {e.table for e in events} == set(TABLES)
    assert {(e.data_interval_start.isoformat(), e.data_interval_end.isoformat()) for e in events} == {
        ("2026-11-02T04:00:00", "2026-11-02T05:00:00")
    }
    assert {e.trigger for e in events} == {"manual"}


@pytest.mark.long
def test_backfill_of_two_intervals_adds_no_duplicates_and_the_second_writes_nothing(site, spark):
    root, lake, env = site
    land(lake, 1, seed=2)
    rc, log = dags_test(env, "2026-11-02T03:00:00+00:00", root / "backfill1.log")  # an earlier interval
    assert rc == 0, log[-3000:]
    first = run_summary.load("activity", run_id_of(log))
    assert first["tables"][0]["rows_in"] == 300  # only the file landed since the last run
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))
    before = versions()
    rc, log = dags_test(env, "2026-11-02T04:00:00+00:00", root / "backfill2.log")
    assert rc == 0, log[-3000:]
    second = run_summary.load("activity", run_id_of(log))
    assert versions() == before
    assert {t["table"]: (t["rows_in"], t["rows_written"]) for t in second["tables"]} == {t: (0, 0) for t in TABLES}
    # Nothing new: the ingest and gold tasks each recorded their run without submitting a Spark application.
    assert log.count("no Spark application started") == 2 and "Spark-Submit cmd" not in log, log[-3000:]
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))


HOLD = """
import sys, time
from millpond.lake.lock import pipeline_lock
with pipeline_lock("activity", "manual-writer"):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_writer_is_refused_with_a_clear_message_and_writes_nothing(site):
    root, lake, env = site
    land(lake, 1, seed=3)
    before = versions()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD],
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "MILLPOND_LAKE": str(lake)},
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        rc, log = dags_test({**env, "MILLPOND_LOCK_WAIT_SECONDS": "0"}, "2026-11-02T06:00:00+00:00", root / "busy.log")
    finally:
        stop_group(holder)
    assert rc != 0
    assert "pipeline busy" in log and "is already running (run manual-writer" in log
    assert versions() == before


def _lock_holder() -> dict | None:
    try:
        with pipeline_lock("activity", "probe"):
            return None
    except PipelineBusy:
        return json.loads(paths.lock_path("activity").read_text() or "{}")


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_killed_task_leaves_no_jvm_and_no_lock(site, how):
    """SIGTERM: what mark-failed, a timeout or the supervisor does (on_kill). SIGKILL: the task process dies hard."""
    root, lake, env = site
    land(lake, 2, seed=10 if how == "sigterm" else 11)
    # A long retry delay: the retry after the kill must not start a new application while we look.
    proc = start_dags_test(
        {**env, "MILLPOND_RETRY_DELAY_SECONDS": "600"}, "2026-11-02T07:00:00+00:00", root / f"kill-{how}.log"
    )
    try:
        holder = wait_for(_lock_holder, timeout=300)
        assert holder, "the Spark job never took the pipeline lock"
        spark = spark_processes(lake)
        assert any(is_runner(" ".join(p.cmdline())) for p in spark), "python driver not found"
        assert holder["pid"] in {p.pid for p in spark}, "the lock is held by the Python driver"
        os.kill(proc.pid, signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        assert wait_for(lambda: not any(p.is_running() and p.status() != "zombie" for p in spark), timeout=60), (
            f"left running: {[(p.pid, p.name()) for p in spark if p.is_running()]}"
        )
        assert _lock_holder() is None, "lock still held"
    finally:
        stop_group(proc)
    assert spark_processes(lake) == []
