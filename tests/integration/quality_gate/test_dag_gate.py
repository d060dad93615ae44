"""The quality gate through the activity DAG: a failing increment stops the run at `quality_gate`, gold untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files, land_file
from millpond.lake import paths
from millpond.lake.delta_log import table_state
from millpond.runs import reports, run_summary
from tests.support.airflow_run import airflow_env, dags_test, migrate, spark_processes, stored_report_links
from tests.support.lake_tables import device_counts, hourly

pytestmark = pytest.mark.integration

FLY_ROWS = 4


@pytest.fixture
def site(tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    lake.mkdir()
    env = airflow_env(tmp_path / "airflow_home", lake)
    migrate(env)
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    yield tmp_path, lake, env
    assert spark_processes(lake) == [], "a Spark process outlived the test"


def land_with_flying_rows(lake):
    """An increment where a few recordings claim the activity 'fly' (not in the suite's set: a `fail` rule)."""
    landed = activity_files(lake / "landing" / "activity", 1, 200, seed=8)[0]
    records = [json.loads(line) for line in landed.read_text().splitlines()]
    for record in records[:FLY_ROWS]:
        record["gt"] = "fly"
    land_file(landed.parent, landed.name, [json.dumps(r) for r in records])


def test_failing_increment_fails_quality_gate_and_leaves_silver_and_gold_unchanged(site, spark):
    root, lake, env = site
    activity_files(lake / "landing" / "activity", 1, 200, seed=7)
    rc, log = dags_test(env, "2026-11-02T05:00:00+00:00", root / "clean.log")
    assert rc == 0, log[-3000:]
    before = {
        t: table_state(paths.table_path(t)).version
        for t in ("silver.activity", "gold.device_counts", "gold.activity_hourly")
    }
    gold_before = (device_counts(spark), hourly(spark))

    land_with_flying_rows(lake)
    rc, log = dags_test(env, "2026-11-02T06:00:00+00:00", root / "fly.log")
    assert rc != 0
    assert "quality gate failed" in log
    assert "activity.silver.activity" in log and "expect_column_values_to_be_in_set" in log
    assert f"unexpected={FLY_ROWS}" in log
    summary = run_summary.latest("activity")
    silver = next(t for t in summary["tables"] if t["table"] == "silver.activity")
    assert silver["outcome"] == "gate_failed"
    assert silver["gate"]["report_path"] in log
    # Built inside spark-submit (code from the zip): its page still loads its styles from the lake, not a CDN.
    assert reports.external_loads(Path(silver["gate"]["report_path"])) == []
    assert "gold.device_counts" not in {t["table"] for t in summary["tables"] if t["outcome"] == "succeeded"}
    after = {t: table_state(paths.table_path(t)).version for t in before}
    assert after == before  # neither silver nor gold got a new version
    assert (device_counts(spark), hourly(spark)) == gold_before

    # The "Data-quality report" links Airflow stored (XCom `_link_ReportLink`, what the UI's button shows): the
    # failing run's gate task points at the report that names the failure, the clean run's at its own report.
    links = stored_report_links(root / "airflow_home")
    failing = {task: url for (run_id, task), url in links.items() if run_id == summary["run_id"]}
    assert failing == {"ingest": report_url(silver), "quality_gate": report_url(silver)}, links
    clean_run = {run_id for run_id, _ in links} - {summary["run_id"]}
    assert len(clean_run) == 1, links
    clean = {task: url for (run_id, task), url in links.items() if run_id in clean_run}
    assert set(clean) == {"ingest", "quality_gate", "gold"} and len(set(clean.values())) == 1, clean
    for url in {*failing.values(), *clean.values()}:
        assert url.startswith("millpond/reports/datadocs/") and url.endswith(".html"), url
        assert (reports.reports_dir() / url.removeprefix("millpond/reports/")).is_file(), url


def report_url(table_entry: dict) -> str:
    relative = Path(table_entry["gate"]["report_path"]).relative_to(reports.reports_dir())
    return f"millpond/reports/{relative.as_posix()}"
