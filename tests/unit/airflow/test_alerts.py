"""Alerts in Airflow (millpond.airflow.alerts): the sentinel DAG and each pipeline DAG's deadline alert as Airflow
parses and serializes them, a missed deadline's callback run by Airflow's own callback runner, and the sentinel's
task sending through a notifier whose templates are rendered for each alert. The sentinel on a real scheduler is in
tests/integration/airflow/test_make_up.py::test_every_run_start_on_a_fresh_lake_succeeds."""

from __future__ import annotations

import json
import logging
import shutil
from datetime import UTC, datetime, timedelta

import pytest

from millpond.spec import load_pipeline
from tests.support import REPO

pytestmark = pytest.mark.unit


def alert_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_sentinel_dag_and_the_deadline_alerts_are_what_airflow_parses_and_serializes(monkeypatch, tmp_path):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    # Off by default: `airflow dags test` of a DAG with a deadline exits 1 after a good run (apache/airflow#73428).
    assert not DagBag(dag_folder=str(REPO / "dags")).dags["activity"].deadline
    alerts = tmp_path / "alerts.jsonl"
    monkeypatch.setenv("MILLPOND_ALERT_FILE", str(alerts))
    monkeypatch.setenv("MILLPOND_DEADLINE_ALERTS", "on")  # what `make up` and compose set
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
    assert deadline.callback.path == "millpond.airflow.alerts.missed_deadline"
    assert deadline.callback.kwargs == {
        "notifier": "millpond.airflow.alerts.AlertFileNotifier",
        "notifier_kwargs": {"path": str(alerts)},
    }
    assert not bag.dags["activity__reprocess"].deadline  # backfill runs queue behind each other by design
    assert not bag.dags["clicks"].deadline  # no goals
    assert sentinel.is_paused_upon_creation is False  # Airflow's default would leave the sentinel silent
    serialized = json.dumps(DagSerialization.to_dict(bag.dags["activity"]))
    assert "DagRunQueuedAtDeadline" in serialized and str(alerts) in serialized

    # Without MILLPOND_ALERT_FILE the deadline still alerts: a warning in the callback's log.
    monkeypatch.delenv("MILLPOND_ALERT_FILE")
    (deadline,) = DagBag(dag_folder=str(REPO / "dags")).dags["activity"].deadline
    assert deadline.callback.kwargs["notifier"] is None


def test_no_goal_in_any_spec_means_no_sentinel_dag(monkeypatch, tmp_path):
    from millpond.airflow.factory import build_all

    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    shutil.copy(REPO / "pipelines" / "clicks.yaml", pipelines_dir)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(pipelines_dir))
    assert sorted(build_all()) == ["clicks"]


def missed(deadline, context) -> tuple[bool, str | None]:
    """What Airflow's executor does with a missed deadline's callback (callback_supervisor.execute_callback)."""
    import structlog
    from airflow.sdk.execution_time.callback_supervisor import execute_callback

    kwargs = {**deadline.callback.kwargs, "context": context}
    return execute_callback(deadline.callback.path, kwargs, "", None, structlog.get_logger())


# What the scheduler hands the executor when the deadline passes (airflow.models.deadline.Deadline.handle_miss): its
# times come back from the database as datetimes.
MISSED = {
    "dag_run": {"dag_id": "activity", "dag_run_id": "scheduled__2026-11-28T10:00:00+00:00", "queued_at": None},
    "deadline": {"id": "d-1", "deadline_time": datetime(2026, 11, 28, 13, 0, 5, tzinfo=UTC)},
}


def test_a_missed_deadline_reaches_a_templated_notifier_through_airflows_callback_runner(monkeypatch, tmp_path):
    from millpond.airflow.alerts import Alerting, run_deadline

    monkeypatch.setenv("MILLPOND_DEADLINE_ALERTS", "on")
    # The same templates as the sentinel's alerts: `alert` with `kind` and `subject` in both.
    alerting = Alerting("millpond.airflow.alerts.AlertFileNotifier", {"path": str(tmp_path / "{{ alert.kind }}")})
    deadline = run_deadline(load_pipeline("activity"), alerting)
    assert deadline is not None
    assert missed(deadline, MISSED) == (True, None)
    (line,) = alert_lines(tmp_path / "deadline")
    assert {k: line[k] for k in ("kind", "dag_id", "run_id", "deadline_time")} == {
        "kind": "deadline",
        "dag_id": "activity",
        "run_id": "scheduled__2026-11-28T10:00:00+00:00",
        "deadline_time": "2026-11-28T13:00:05+00:00",
    }
    assert "not ended by 2026-11-28T13:00:05+00:00" in line["subject"]


def test_a_missed_deadline_without_a_notifier_is_a_warning_in_the_callbacks_log(caplog, monkeypatch):
    from millpond.airflow.alerts import Alerting, run_deadline

    monkeypatch.setenv("MILLPOND_DEADLINE_ALERTS", "on")
    deadline = run_deadline(load_pipeline("activity"), Alerting())
    assert deadline is not None
    with caplog.at_level(logging.WARNING, logger="millpond.airflow.alerts"):
        assert missed(deadline, MISSED) == (True, None)
    assert "scheduled__2026-11-28T10:00:00+00:00 not ended by 2026-11-28T13:00:05+00:00" in caplog.text


def test_the_sentinel_task_renders_the_notifiers_templates_for_each_alert(lake, tmp_path):
    from millpond.airflow.alerts import Alerting, FreshnessSentinelOperator

    # A dotted path, as a DAG file names a provider's notifier; the path is a template rendered per alert.
    alerting = Alerting("millpond.airflow.alerts.AlertFileNotifier", {"path": str(tmp_path / "{{ alert.table }}")})
    task = FreshnessSentinelOperator(task_id="check_freshness", alerting=alerting)
    statuses = task.execute({"run_id": "manual__1"})
    assert {(s["pipeline"], s["table"], s["status"]) for s in statuses} == {
        ("activity", "gold.device_counts", "stale"),
        ("activity", "gold.activity_hourly", "stale"),
        ("device_status", "silver.device_status", "stale"),  # its Kafka address unset here: checked all the same
    }
    for table in ("gold.device_counts", "gold.activity_hourly", "silver.device_status"):
        (line,) = alert_lines(tmp_path / table)
        assert (line["kind"], line["table"], line["alert"], line["note"]) == (
            "freshness",
            table,
            "stale",
            "no data yet",
        )
    task.execute({"run_id": "manual__2"})  # still stale: nothing sent
    tables = ("gold.device_counts", "gold.activity_hourly", "silver.device_status")
    assert [len(alert_lines(tmp_path / t)) for t in tables] == [1, 1, 1]


def test_a_spec_that_does_not_load_fails_the_check_after_the_others_were_checked(lake, tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowException

    from millpond.airflow.alerts import Alerting, FreshnessSentinelOperator
    from millpond.runs.freshness_watch import last_statuses

    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    shutil.copy(REPO / "pipelines" / "activity.yaml", pipelines_dir)
    (pipelines_dir / "orders.yaml").write_text("pipeline: [unclosed\n")
    monkeypatch.setenv("MILLPOND_PIPELINES", str(pipelines_dir))
    task = FreshnessSentinelOperator(task_id="check_freshness", alerting=Alerting())
    with pytest.raises(AirflowException, match=r"orders\.yaml"):
        task.execute({"run_id": "manual__1"})
    assert {t for t, (_, status) in last_statuses().items() if status == "stale"} == {
        "gold.device_counts",
        "gold.activity_hourly",
    }
