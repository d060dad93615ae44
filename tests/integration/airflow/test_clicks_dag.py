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

pytestmark = pytest.mark.integration


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
