"""Ways of starting a run that the scheduled path does not exercise, through real Airflow runs (SQLite, local Spark).

- A run without a logical date (the REST API's default, the UI's trigger without a date): Airflow 3 gives it no data
  interval, and the template context then has no `data_interval_start` at all.
- Two lakes against one Airflow metadata database (a moved lake): the tables' assets must stay the same assets.

One Airflow home for the module; each scenario builds on the previous runs, as in production.
"""

from __future__ import annotations

import sqlite3
import subprocess

import pytest
from deltalake import DeltaTable

from millpond.dev.sample_data import activity_files
from millpond.lake import paths
from millpond.runs import run_summary
from tests.support import REPO
from tests.support.airflow_run import BIN, airflow_env, dags_test, migrate, spark_processes, stop_group

pytestmark = [pytest.mark.integration, pytest.mark.long]

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")

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
    root = tmp_path_factory.mktemp("run-starts")
    lakes = root / "lake-a", root / "lake-b"
    for lake in lakes:
        lake.mkdir()
    env = airflow_env(root / "airflow_home", lakes[0])
    migrate(env)
    yield root, lakes, env
    for lake in lakes:
        assert spark_processes(lake) == [], "a Spark process outlived the tests"


def land(lake, seed):
    return activity_files(lake / "landing" / "activity", 1, 200, duplicates=0.05, malformed=0.01, seed=seed)


def run_id_of(log: str, pipeline: str = "activity") -> str:
    for line in log.splitlines():
        if line.startswith("run ") and f" of pipeline {pipeline} " in line:
            return line.split()[1]
    raise AssertionError(f"run_summary did not print its table:\n{log[-3000:]}")


def summary(lake, run_id: str) -> dict:
    recorded = run_summary.load("activity", run_id, root=lake)
    assert recorded, f"no run summary for {run_id} in {lake}"
    return recorded


def events(lake, run_id: str) -> list[dict]:
    rows = DeltaTable(str(paths.event_log_path(lake))).to_pyarrow_table().to_pylist()
    return [r for r in rows if r["run_id"] == run_id]


def test_a_run_without_a_logical_date_succeeds_and_records_no_interval(site):
    root, (lake, _), env = site
    land(lake, seed=1)
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
    assert recorded["tables"][0]["rows_in"] == 200
    assert "data interval: none" in text, text[-3000:]
    rows = events(lake, run_id)
    assert {r["table"] for r in rows} == set(TABLES)
    assert {(r["data_interval_start"], r["data_interval_end"], r["trigger"]) for r in rows} == {(None, None, "manual")}


def test_two_lakes_against_one_airflow_database_both_succeed(site):
    """The same DAG, run against lake B and then lake A again: the assets are the tables, wherever the lake is."""
    root, (lake_a, lake_b), env = site
    land(lake_b, seed=2)
    rc, log = dags_test({**env, "MILLPOND_LAKE": str(lake_b)}, "2026-11-02T05:00:00+00:00", root / "lake-b.log")
    assert "AirflowInactiveAssetInInletOrOutletException" not in log, log[-3000:]
    assert rc == 0, log[-3000:]
    recorded = summary(lake_b, run_id_of(log))
    assert recorded["data_interval"] == {"start": "2026-11-02T04:00:00+00:00", "end": "2026-11-02T05:00:00+00:00"}
    assert recorded["tables"][0]["rows_in"] == 200 and (lake_b / "gold" / "device_counts" / "_delta_log").is_dir()

    land(lake_a, seed=3)
    rc, log = dags_test(env, "2026-11-02T06:00:00+00:00", root / "lake-a-again.log")
    assert rc == 0, log[-3000:]
    assert summary(lake_a, run_id_of(log))["tables"][0]["rows_in"] == 200  # only the file landed since run 1

    with sqlite3.connect(root / "airflow_home" / "airflow.db") as db:
        assets = db.execute("SELECT name, uri FROM asset WHERE name LIKE 'delta.%' ORDER BY name").fetchall()
        active = db.execute("SELECT name, uri FROM asset_active WHERE name LIKE 'delta.%' ORDER BY name").fetchall()
    # One asset per table (of every pipeline), none holding a lake path, and all of them active.
    assert assets == active, (assets, active)
    assert {(n, u) for n, u in assets if n.removeprefix("delta.") in TABLES} == {
        (f"delta.{t}", f"x-millpond://{t.replace('.', '/')}") for t in TABLES
    }
    assert not [u for _, u in assets if str(root) in u or u.startswith("file:")], assets
