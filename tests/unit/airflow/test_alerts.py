"""Alerts in Airflow (millpond.airflow.alerts): the sentinel DAG and each pipeline DAG's deadline alert as Airflow
parses and serializes them, a missed deadline's callback run by Airflow's own callback runner, and the sentinel's
task sending through a notifier whose templates are rendered for each alert. The sentinel on a real scheduler is in
tests/integration/airflow/test_make_up.py::test_every_run_start_on_a_fresh_lake_succeeds."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest

from millpond.spec import load_pipeline
from tests.support import REPO

pytestmark = pytest.mark.unit


def alert_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_sentinel_dag_and_the_deadline_alerts_are_what_airflow_parses_and_serializes(monkeypatch, tmp_path):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    alerts = tmp_path / "alerts.jsonl"
    monkeypatch.setenv("MILLPOND_ALERT_FILE", str(alerts))
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}

    sentinel = bag.dags["millpond_freshness"]
    assert type(sentinel.timetable).__name__ == "CronTriggerTimetable"
    assert sentinel.timetable.expression == "*/5 * * * *" and sentinel.catchup is False
    assert [t.task_id for t in sentinel.tasks] == ["check_freshness"] and sentinel.max_active_runs == 1
    assert all(table in sentinel.doc_md for table in ("gold.device_counts", "gold.activity_hourly"))

    # activity's goals (warn 90m, error 2h): a run not ended 2 h after it was queued lets a gold table go stale.
    (deadline,) = bag.dags["activity"].deadline
    assert type(deadline.reference).__name__ == "DagRunQueuedAtDeadline"
    assert deadline.interval == timedelta(hours=2)
    assert deadline.callback.path == "millpond.airflow.alerts.AlertFileNotifier"
    assert deadline.callback.kwargs == {"path": str(alerts)}
    assert not bag.dags["activity__reprocess"].deadline  # backfill runs queue behind each other by design
    assert not bag.dags["clicks"].deadline  # no goals
    serialized = json.dumps(DagSerialization.to_dict(bag.dags["activity"]))
    assert "DagRunQueuedAtDeadline" in serialized and str(alerts) in serialized

    # Without MILLPOND_ALERT_FILE the deadline still alerts: a warning in the callback's log.
    monkeypatch.delenv("MILLPOND_ALERT_FILE")
    (deadline,) = DagBag(dag_folder=str(REPO / "dags")).dags["activity"].deadline
    assert deadline.callback.path == "millpond.airflow.alerts.log_alert"


def test_no_goal_in_any_spec_means_no_sentinel_dag(monkeypatch, tmp_path):
    from millpond.airflow.factory import build_all

    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    shutil.copy(REPO / "pipelines" / "clicks.yaml", pipelines_dir)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(pipelines_dir))
    assert sorted(build_all()) == ["clicks"]


def test_a_missed_deadline_reaches_the_notifier_through_airflows_callback_runner(monkeypatch, tmp_path):
    import structlog
    from airflow.sdk.execution_time.callback_supervisor import execute_callback

    from millpond.airflow.alerts import Alerting, run_deadline

    alerts = tmp_path / "alerts" / "deadlines.jsonl"
    monkeypatch.setenv("MILLPOND_ALERT_FILE", str(alerts))
    deadline = run_deadline(load_pipeline("activity"), Alerting.from_settings())
    assert deadline is not None
    # What the scheduler hands the executor when the deadline passes (airflow.models.deadline.Deadline.handle_miss).
    context = {
        "dag_run": {"dag_id": "activity", "dag_run_id": "scheduled__2026-11-28T10:00:00+00:00", "queued_at": "q"},
        "deadline": {"id": "d-1", "deadline_time": "2026-11-28T13:00:05+00:00"},
    }
    ok, error = execute_callback(
        deadline.callback.path, {**deadline.callback.kwargs, "context": context}, "", None, structlog.get_logger()
    )
    assert (ok, error) == (True, None)
    (line,) = alert_lines(alerts)
    assert {k: line[k] for k in ("kind", "dag_id", "run_id", "deadline_time")} == {
        "kind": "deadline",
        "dag_id": "activity",
        "run_id": "scheduled__2026-11-28T10:00:00+00:00",
        "deadline_time": "2026-11-28T13:00:05+00:00",
    }


def test_the_sentinel_task_renders_the_notifiers_templates_for_each_alert(lake, tmp_path):
    from millpond.airflow.alerts import Alerting, FreshnessSentinelOperator

    # A dotted path, as a DAG file names a provider's notifier; the path is a template rendered per alert.
    alerting = Alerting("millpond.airflow.alerts.AlertFileNotifier", {"path": str(tmp_path / "{{ freshness.table }}")})
    task = FreshnessSentinelOperator(task_id="check_freshness", alerting=alerting)
    statuses = task.execute({"run_id": "manual__1"})
    assert {(s["pipeline"], s["table"], s["status"]) for s in statuses} == {
        ("activity", "gold.device_counts", "stale"),
        ("activity", "gold.activity_hourly", "stale"),
    }
    for table in ("gold.device_counts", "gold.activity_hourly"):
        (line,) = alert_lines(tmp_path / table)
        assert (line["kind"], line["table"], line["alert"], line["note"]) == (
            "freshness",
            table,
            "stale",
            "no data yet",
        )
    task.execute({"run_id": "manual__2"})  # still stale: nothing sent
    assert [len(alert_lines(tmp_path / t)) for t in ("gold.device_counts", "gold.activity_hourly")] == [1, 1]
