"""Airflow's Spark tasks on the engine: with SPARK_REMOTE set (as `make up` sets it) a DAG run submits no Spark
application; its runs go to the engine, and the tables equal the plain-Python reference."""

from __future__ import annotations

import pytest

from millpond.dev.sample_data import activity_files
from tests.integration.engine.test_engine import clean_env, millpond
from tests.support.airflow_run import airflow_env, dags_test, migrate, spark_processes
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine_remote(tmp_path_factory):
    lake = tmp_path_factory.mktemp("engine-lake")
    env = clean_env(MILLPOND_LAKE=str(lake))
    started = millpond(env, "engine", "start", timeout=240)
    assert started.returncode == 0, started.stderr[-3000:]
    yield started.stdout.strip()
    millpond(env, "engine", "stop", timeout=120)


def test_a_dag_run_on_the_engine_submits_nothing_and_equals_the_reference(spark, lake, tmp_path, engine_remote):
    env = airflow_env(tmp_path / "airflow_home", lake, SPARK_REMOTE=engine_remote)
    migrate(env)
    activity_files(lake / "landing" / "activity", 2, 300, duplicates=0.05, malformed=0.02, seed=1)
    rc, log = dags_test(env, "2026-11-02T05:00:00+00:00", tmp_path / "run.log")
    assert rc == 0, log[-4000:]
    assert log.count("millpond: on the engine at sc://localhost:") == 2, log[-4000:]  # ingest and gold
    assert "Spark-Submit cmd" not in log
    assert spark_processes(lake) == []
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))
