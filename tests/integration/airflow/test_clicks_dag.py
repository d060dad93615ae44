"""The clicks example through a real `airflow dags test` run: the join, the lookup and the gated CTR table.

One DAG run after the first landed round of tests/integration/pipelines/test_joins.py: every clicks table equals that module's
plain-Python reference. (Runs across rounds, crashes and reruns are that module's, through `millpond run`; a DAG
run of clicks costs ~2-4 minutes on 2 cores, so CI runs one.)
"""

from __future__ import annotations

import pytest

from millpond.runs import run_summary
from tests.integration.pipelines.test_joins import (
    DIMENSIONS,
    ROUNDS,
    TABLES,
    assert_ctr,
    gold_reference,
    land,
    read_gold,
    read_joined,
    reference,
)
from tests.support.airflow_run import airflow_env, dags_test, migrate, spark_processes

pytestmark = [pytest.mark.integration, pytest.mark.long]


def test_a_clicks_dag_run_matches_the_reference(tmp_path, spark, monkeypatch):
    lake = tmp_path / "lake"
    lake.mkdir()
    env = airflow_env(tmp_path / "airflow_home", lake)
    migrate(env)
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    for round_number, logical_date in enumerate(("2026-11-02T05:00:00+00:00",)):
        land(lake, round_number)
        rc, log = dags_test(env, logical_date, tmp_path / f"run{round_number}.log", dag_id="clicks")
        assert rc == 0, log[-3000:]
        expected = reference(ROUNDS[: round_number + 1])
        assert read_joined(spark) == expected, f"after DAG run {round_number}"
        assert read_gold(spark) == gold_reference(expected)
        assert_ctr(spark, ROUNDS[: round_number + 1], DIMENSIONS[: round_number + 1])
        printed = next(line for line in log.splitlines() if line.startswith("run ") and " of pipeline clicks " in line)
        summary = run_summary.load("clicks", printed.split()[1])
        assert [t["table"] for t in summary["tables"]] == list(TABLES)
        assert all(t["outcome"] == "succeeded" for t in summary["tables"]), summary
        gate = next(t for t in summary["tables"] if t["table"] == "gold.campaign_ctr")["gate"]
        assert gate["outcome"] == "passed" and gate["rows_validated"] > 0, gate
    assert spark_processes(lake) == [], "a Spark process outlived the DAG run"


def test_the_first_clicks_dag_run_on_a_fresh_lake_succeeds_without_spark(tmp_path):
    """Nothing has landed (`make up` on a fresh lake): a green run that wrote nothing, says why, and started no JVM."""
    lake = tmp_path / "lake"
    lake.mkdir()
    env = airflow_env(tmp_path / "airflow_home", lake)
    migrate(env)
    rc, log = dags_test(env, "2026-11-02T05:00:00+00:00", tmp_path / "fresh.log", dag_id="clicks")
    assert rc == 0, log[-3000:]
    assert "PATH_NOT_FOUND" not in log and "Spark-Submit cmd" not in log, log[-3000:]
    assert "millpond: bronze.impressions: nothing has landed in landing/impressions yet" in log, log[-3000:]
    printed = next(line for line in log.splitlines() if line.startswith("run ") and " of pipeline clicks " in line)
    summary = run_summary.load("clicks", printed.split()[1], root=lake)
    assert {t["table"]: (t["outcome"], t["rows_written"]) for t in summary["tables"]} == {
        t: ("succeeded", 0) for t in TABLES
    }
    assert not (lake / "bronze").exists() and not (lake / "_checkpoints").exists()
