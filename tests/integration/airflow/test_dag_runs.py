"""The activity DAG through real `airflow dags test` runs (SQLite, local Spark via spark-submit), one Airflow home and
two lakes for the module, each scenario building on the previous runs, as in production:

- a run ingests what landed, end to end, and a backfill of two earlier intervals adds nothing twice;
- two lakes against one Airflow metadata database (a moved lake): the tables' assets stay the same assets;
- a run without a logical date (the REST API's default, the UI's trigger without a date): Airflow 3 gives it no data
  interval, and the template context then has no `data_interval_start` at all;
- the quality gate: a failing increment stops the run at `quality_gate`, silver and gold untouched, and the task's
  "Data-quality report" link points at the report that names the failure;
- a second writer is refused, and a killed task leaves no JVM and no lock.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from deltalake import DeltaTable

from millpond.dev.sample_data import activity_files, land_file
from millpond.lake import paths
from millpond.lake.delta_log import table_state
from millpond.lake.lock import pipeline_lock
from millpond.lake.lock_errors import PipelineBusy
from millpond.runs import reports, run_summary
from millpond.spec import load_pipeline
from tests.support import REPO
from tests.support.airflow_run import (
    BIN,
    airflow_env,
    dags_test,
    is_runner,
    migrate,
    spark_processes,
    start_dags_test,
    stop_group,
    stored_report_links,
    wait_for,
)
from tests.support.lake_tables import assert_matches_reference, device_counts, hourly
from tests.support.lineage import (
    assert_children_of_airflow_tasks,
    assert_lineage_of_a_first_run,
    events_in,
    file_transport,
    http_receiver,
)
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")
FLY_ROWS = 4

# `dag.test(logical_date=None)`: the run the API creates for `logical_date: null` (no logical date, no interval).
WITHOUT_LOGICAL_DATE = """
import sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).dags[sys.argv[2]]
run = dag.test(logical_date=None)
print(f"dag run {run.run_id} logical_date={run.logical_date} state={run.state}", flush=True)
sys.exit(0 if str(run.state) in ("success", "DagRunState.SUCCESS") else 1)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """An Airflow home (migrated) and lakes A and B; MILLPOND_LAKE points this process at lake A."""
    root = tmp_path_factory.mktemp("airflow-site")
    lake = root / "lake"
    lake.mkdir()
    (root / "lake-b").mkdir()
    env = airflow_env(root / "airflow_home", lake)
    migrate(env)
    previous = os.environ.get("MILLPOND_LAKE")
    os.environ["MILLPOND_LAKE"] = str(lake)
    yield root, lake, env
    if previous is None:
        os.environ.pop("MILLPOND_LAKE", None)
    else:
        os.environ["MILLPOND_LAKE"] = previous
    for each in (lake, root / "lake-b", root / "lake-engine"):
        assert spark_processes(each) == [], "a Spark process outlived the tests"


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


def test_dag_run_processes_landed_files_end_to_end(site, spark, backend, monkeypatch):
    """On both backends: spark-submit per Spark task (lake A, which the later tests go on with), or every task's run
    on the worker's engine through the Airflow connection, as `make up` defines it (a lake of its own)."""
    root, lake, env = site
    on_engine = backend.name == "engine"
    if on_engine:
        lake = root / "lake-engine"
        env = {k: v for k, v in env.items() if k != "SPARK_REMOTE"}  # the connection alone names the engine
        env |= {"MILLPOND_LAKE": str(lake), "AIRFLOW_CONN_SPARK_CONNECT_MILLPOND": backend.airflow_connection}
        monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    hour = 10 if on_engine else 5
    land(lake, 2, seed=1)
    # Airflow's OpenLineage provider and millpond send to one receiver: a file on the own-JVM backend, a loopback
    # HTTP server (openlineage-python's HTTP transport, by the standard OPENLINEAGE_URL) on the engine.
    with ExitStack() as stack:
        if on_engine:
            url, received = stack.enter_context(http_receiver())
            transport = {"OPENLINEAGE_URL": url}
        else:
            sent = root / "lineage.jsonl"
            transport = file_transport(sent)
        rc, log = dags_test(
            {**env, **transport}, f"2026-11-02T{hour:02d}:00:00+00:00", root / f"run1-{backend.name}.log"
        )
    assert rc == 0, log[-3000:]
    events = list(received) if on_engine else events_in(sent)
    activity = load_pipeline("activity")
    assert_lineage_of_a_first_run(events, activity, lake)
    # Each table's events are children of the Airflow task that ran it, and of the DAG run at the root: the ids the
    # provider gave the task's and the DAG run's own events.
    assert_children_of_airflow_tasks(events, activity)
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))
    run_id = run_id_of(log)
    summary = run_summary.load("activity", run_id)
    assert [t["table"] for t in summary["tables"]] == list(TABLES)
    assert all(t["outcome"] == "succeeded" for t in summary["tables"])
    assert summary["tables"][0]["rows_in"] == 600  # both files, counted per table in the summary
    if on_engine:  # the ingest and gold tasks ran on the engine: no Spark application was submitted
        assert log.count("millpond: on the engine at sc://localhost:") == 2, log[-4000:]
        assert "Spark-Submit cmd" not in log and "driver jit" not in log.lower(), log[-3000:]
    else:  # spark-submit started the ingest task's driver JVM with C1 only (read back from the JVM by the runner);
        # gold's first run reads all of silver, which is not sized before it starts, so it keeps the default JIT.
        assert "millpond: driver JIT quick (C1 only, methods of any size): 0.1 MB of new input <= 32 MB" in log, log
        assert (
            "millpond: driver JIT full (tiered C1 + C2, methods of any size): this run's new input cannot be sized"
        ) in log, log[-3000:]
    assert spark_processes(lake) == []
    with sqlite3.connect(root / "airflow_home" / "airflow.db") as db:  # per-table XComs of run_summary
        rows = db.execute("SELECT key FROM xcom WHERE task_id = 'run_summary' AND run_id = ?", (run_id,))
        keys = {key for (key,) in rows}
    assert keys >= set(TABLES)
    # The event log ties each table's run to the Airflow run and its data interval.
    events = spark.read.format("delta").load(str(paths.event_log_path())).where(f"run_id = '{run_id}'").collect()
    assert {e.table for e in events} == set(TABLES)
    assert {(e.data_interval_start.isoformat(), e.data_interval_end.isoformat()) for e in events} == {
        (f"2026-11-02T{hour - 1:02d}:00:00", f"2026-11-02T{hour:02d}:00:00")
    }
    assert {e.trigger for e in events} == {"manual"}


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


def summary(lake, run_id: str) -> dict:
    recorded = run_summary.load("activity", run_id, root=lake)
    assert recorded, f"no run summary for {run_id} in {lake}"
    return recorded


def events(lake, run_id: str) -> list[dict]:
    rows = DeltaTable(str(paths.event_log_path(lake))).to_pyarrow_table().to_pylist()
    return [r for r in rows if r["run_id"] == run_id]


def test_a_second_lake_against_the_same_airflow_database_succeeds(site):
    """The same DAG, run against lake B after lake A's runs: the assets are the tables, wherever the lake is (lake A
    again: the next test's run)."""
    root, _, env = site
    lake_b = root / "lake-b"
    activity_files(lake_b / "landing" / "activity", 1, 200, duplicates=0.05, malformed=0.01, seed=2)
    rc, log = dags_test({**env, "MILLPOND_LAKE": str(lake_b)}, "2026-11-02T08:00:00+00:00", root / "lake-b.log")
    assert "AirflowInactiveAssetInInletOrOutletException" not in log, log[-3000:]
    assert rc == 0, log[-3000:]
    recorded = summary(lake_b, run_id_of(log))
    assert recorded["data_interval"] == {"start": "2026-11-02T07:00:00+00:00", "end": "2026-11-02T08:00:00+00:00"}
    assert recorded["tables"][0]["rows_in"] == 200 and (lake_b / "gold" / "device_counts" / "_delta_log").is_dir()


def test_a_run_without_a_logical_date_succeeds_on_lake_a_again_and_records_no_interval(site):
    root, lake, env = site
    land(lake, 1, seed=20)
    log_path = root / "no-logical-date.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(BIN / "python"), "-c", WITHOUT_LOGICAL_DATE, str(REPO / "dags"), "activity"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=900)
        finally:
            stop_group(proc)
    text = log_path.read_text(errors="replace")
    assert "'data_interval_start' is undefined" not in text, text[-3000:]
    assert rc == 0, text[-3000:]
    assert "logical_date=None state=" in text, text[-3000:]
    run_id = run_id_of(text)
    recorded = summary(lake, run_id)
    assert recorded["data_interval"] == "none", recorded
    assert {t["table"]: t["outcome"] for t in recorded["tables"]} == dict.fromkeys(TABLES, "succeeded")
    assert recorded["tables"][0]["rows_in"] == 300  # only the file landed since lake A's last run
    assert "data interval: none" in text, text[-3000:]
    rows = events(lake, run_id)
    assert {r["table"] for r in rows} == set(TABLES)
    assert {(r["data_interval_start"], r["data_interval_end"], r["trigger"]) for r in rows} == {(None, None, "manual")}

    with sqlite3.connect(root / "airflow_home" / "airflow.db") as db:
        assets = db.execute("SELECT name, uri FROM asset WHERE name LIKE 'delta.%' ORDER BY name").fetchall()
        active = db.execute("SELECT name, uri FROM asset_active WHERE name LIKE 'delta.%' ORDER BY name").fetchall()
    # One asset per table (of every pipeline), none holding a lake path, and all of them active.
    assert assets == active, (assets, active)
    assert {(n, u) for n, u in assets if n.removeprefix("delta.") in TABLES} == {
        (f"delta.{t}", f"x-millpond://{t.replace('.', '/')}") for t in TABLES
    }
    assert not [u for _, u in assets if str(root) in u or u.startswith("file:")], assets


def land_with_flying_rows(lake):
    """An increment where a few recordings claim the activity 'fly' (not in the suite's set: a `fail` rule)."""
    landed = activity_files(lake / "landing" / "activity", 1, 200, seed=8)[0]
    records = [json.loads(line) for line in landed.read_text().splitlines()]
    for record in records[:FLY_ROWS]:
        record["gt"] = "fly"
    land_file(landed.parent, landed.name, [json.dumps(r) for r in records])


def test_a_failing_increment_fails_the_quality_gate_and_leaves_silver_and_gold_unchanged(site, spark, monkeypatch):
    """On lake B, whose clean run the test before made."""
    root, _, env = site
    lake = root / "lake-b"
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    clean_run = run_summary.latest("activity")["run_id"]
    before = {
        t: table_state(paths.table_path(t)).version
        for t in ("silver.activity", "gold.device_counts", "gold.activity_hourly")
    }
    gold_before = (device_counts(spark), hourly(spark))

    land_with_flying_rows(lake)
    rc, log = dags_test({**env, "MILLPOND_LAKE": str(lake)}, "2026-11-02T09:00:00+00:00", root / "fly.log")
    assert rc != 0
    assert "quality gate failed" in log
    assert "activity.silver.activity" in log and "expect_column_values_to_be_in_set" in log
    assert f"unexpected={FLY_ROWS}" in log
    failed = run_summary.latest("activity")
    silver = next(t for t in failed["tables"] if t["table"] == "silver.activity")
    assert silver["outcome"] == "gate_failed"
    assert silver["gate"]["report_path"] in log
    # Built inside spark-submit (code from the zip): its page still loads its styles from the lake, not a CDN.
    assert reports.external_loads(Path(silver["gate"]["report_path"])) == []
    assert "gold.device_counts" not in {t["table"] for t in failed["tables"] if t["outcome"] == "succeeded"}
    after = {t: table_state(paths.table_path(t)).version for t in before}
    assert after == before  # neither silver nor gold got a new version
    assert (device_counts(spark), hourly(spark)) == gold_before

    # The "Data-quality report" links Airflow stored (XCom `_link_ReportLink`, what the UI's button shows): the
    # failing run's gate task points at the report that names the failure, the clean run's at its own report.
    links = stored_report_links(root / "airflow_home")
    failing = {task: url for (run_id, task), url in links.items() if run_id == failed["run_id"]}
    assert failing == {"ingest": report_url(silver), "quality_gate": report_url(silver)}, links
    clean = {task: url for (run_id, task), url in links.items() if run_id == clean_run}
    assert set(clean) == {"ingest", "quality_gate", "gold"} and len(set(clean.values())) == 1, clean
    for url in {*failing.values(), *clean.values()}:
        assert url.startswith("millpond/reports/datadocs/") and url.endswith(".html"), url
        assert (reports.reports_dir() / url.removeprefix("millpond/reports/")).is_file(), url


def report_url(table_entry: dict) -> str:
    relative = Path(table_entry["gate"]["report_path"]).relative_to(reports.reports_dir())
    return f"millpond/reports/{relative.as_posix()}"


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
