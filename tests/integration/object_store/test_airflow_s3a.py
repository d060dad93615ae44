"""The activity DAG on a lake in a real S3 server, through real `airflow dags test` runs: the credentials and
endpoint come from the Airflow connection `aws_millpond` alone (Airflow's environment has no AWS_* variable), each
run's tables equal the plain-Python reference, and a run with nothing new starts no Spark application.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

import pytest

from millpond.airflow.plugin import resolve_report
from millpond.dev.sample_data import activity_files
from millpond.lake.object_store import S3Path
from tests.support.airflow_run import airflow_env, dags_test, migrate, spark_processes, stored_report_links
from tests.support.lake_tables import assert_matches_reference_rs
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration


def test_dag_runs_on_an_s3a_lake_with_credentials_from_the_airflow_connection(s3_bucket, tmp_path, monkeypatch):
    lake = f"s3a://{s3_bucket.name}/lake"
    monkeypatch.setenv("MILLPOND_LAKE", lake)  # this process reads the tables back with delta-rs
    access = s3_bucket.server.env()
    connection = {
        "conn_type": "aws",
        "login": access["AWS_ACCESS_KEY_ID"],
        "password": access["AWS_SECRET_ACCESS_KEY"],
        "extra": {"endpoint_url": access["AWS_ENDPOINT_URL"], "region_name": access["AWS_REGION"]},
    }
    env = airflow_env(tmp_path / "airflow_home", lake, AIRFLOW_CONN_AWS_MILLPOND=json.dumps(connection))  # type: ignore[arg-type]
    env = {key: value for key, value in env.items() if not key.startswith("AWS_")}
    migrate(env)
    local = tmp_path / "landing"

    activity_files(local, 2, 300, duplicates=0.05, malformed=0.02, seed=1)
    s3_bucket.put_files(sorted(local.glob("*.json")), "lake/landing/activity")
    code, log = dags_test(env, "2026-11-02T05:00:00+00:00", tmp_path / "run1.log")
    assert code == 0, log[-3000:]
    assert_matches_reference_rs(activity_reference(local))
    assert access["AWS_SECRET_ACCESS_KEY"] not in log

    # The tasks' "Data-quality report" links point at the run's report in the bucket, which the viewer serves.
    links = stored_report_links(tmp_path / "airflow_home")
    assert {task for _, task in links} == {"ingest", "quality_gate", "gold"}, links
    for url in set(links.values()):
        assert url.startswith("millpond/reports/datadocs/") and url.endswith(".html"), url
        page = resolve_report(unquote(url.removeprefix("millpond/reports/")))
        assert isinstance(page, S3Path) and b"<html" in page.read_bytes()[:2000].lower(), url

    code, log = dags_test(env, "2026-11-02T06:00:00+00:00", tmp_path / "run2.log")
    assert code == 0, log[-3000:]
    assert "no table has anything new: no Spark application started" in log
    assert_matches_reference_rs(activity_reference(local))
    assert spark_processes(lake) == []  # type: ignore[arg-type]
