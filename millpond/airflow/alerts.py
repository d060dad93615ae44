"""Alerts where Airflow users look: the freshness sentinel's task, each pipeline DAG's deadline alert, and the one
notifier both send through.

    Alerting                   which Airflow notifier sends an alert: a class (or its dotted path) and its arguments
    AlertFileNotifier          an Airflow notifier appending each alert as one JSON line to a file (MILLPOND_ALERT_FILE)
    log_alert                  what runs when no notifier is configured: a warning in the task's or callback's log
    missed_deadline            the deadline alerts' callback: the notifier with the same `alert` context
    FreshnessSentinelOperator  the `millpond_freshness` DAG's task: check every goal, notify, record the changes
    run_deadline               the DeadlineAlert of a pipeline DAG whose tables have freshness goals

Why a class and its arguments, not a notifier object: Airflow's deadline callbacks name their callable by import
path with arguments it can serialize (they run on the executor, not where the DAG file was parsed), and a notifier
object renders its templates in place, once, so each alert needs an instance of its own.

Why the sentinel is a DAG of its own and not a task of each pipeline's DAG: Airflow's deadline alerts and a
pipeline's own tasks say nothing while its DAG is paused, its runs are not created or the scheduler stood still; the
sentinel checks the tables themselves on its own schedule.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import BaseNotifier, BaseOperator
from airflow.sdk.definitions.callback import SyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference
from airflow.sdk.exceptions import AirflowException

from millpond import settings
from millpond.airflow.spark_app import lake_access
from millpond.spec import Pipeline, SpecError, all_spec_paths, load_pipeline

log = logging.getLogger(__name__)

# Imported inside functions: the freshness check (delta-rs, pyarrow) only when the sentinel's task runs: the DAG
# processor imports this module every 30 s.


def freshness_alert(change: dict[str, Any]) -> dict[str, Any]:
    """The sentinel's alert about one table's status change (freshness_watch.StatusChange.as_dict)."""
    why = f" ({change['note']})" if change.get("note") else ""
    subject = (
        f"{change['table']} recovered: {change['status']}"
        if change.get("alert") == "recovered"
        else f"{change['table']} is {change['status']}{why}"
    )
    return {"kind": "freshness", "subject": subject, **change}


def deadline_alert(context: Mapping[str, Any]) -> dict[str, Any]:
    """A missed deadline, from the `dag_run` and `deadline` Airflow passes a deadline callback (times as ISO text: the
    scheduler stores them as datetimes)."""
    dag_run = context.get("dag_run") or {}
    deadline = context.get("deadline") or {}
    facts = {
        "dag_id": dag_run.get("dag_id"),
        "run_id": dag_run.get("dag_run_id") or dag_run.get("run_id"),
        "queued_at": _text(dag_run.get("queued_at")),
        "deadline_time": _text(deadline.get("deadline_time")),
    }
    subject = f"{facts['dag_id']} run {facts['run_id']} not ended by {facts['deadline_time']}: its tables may be stale"
    return {"kind": "deadline", "subject": subject, **facts}


def _text(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class AlertFileNotifier(BaseNotifier):
    """Appends each alert (the context's `alert`: `kind`, `subject`, then what it is about) as one JSON line with
    `sent_at` to `path`: a file a log shipper, a script or a test reads. One `write` per line in append mode, so
    concurrent writers do not tear each other's lines."""

    template_fields = ("path",)

    def __init__(self, path: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path

    def notify(self, context: Any) -> None:
        entry = {**context["alert"], "sent_at": datetime.now(UTC).isoformat()}
        target = Path(self.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, default=str) + "\n")


def log_alert(context: Mapping[str, Any]) -> None:
    """The alert when no notifier is configured: a warning in the log of the task or callback that raised it (a
    missed deadline is also listed on Airflow's Deadlines page)."""
    log.warning(
        "millpond alert (no notifier configured, docs/freshness.md): %s", json.dumps(context["alert"], default=str)
    )


def missed_deadline(context: Mapping[str, Any], notifier: str | None = None, notifier_kwargs: Any = None) -> None:
    """The deadline alert's callback, run by Airflow's executor: the configured notifier (a dotted path) with the
    context every millpond alert has, `alert` (deadline_alert), or log_alert without one."""
    Alerting(notifier, notifier_kwargs or {}).send({**context, "alert": deadline_alert(context)})


@dataclass(frozen=True)
class Alerting:
    """The notifier every millpond alert goes through: an Airflow notifier class (or its dotted path) and the
    arguments it is built with for each alert; None logs the alert instead."""

    notifier: type[BaseNotifier] | str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls) -> Alerting:
        path = settings.ALERT_FILE.raw()
        return cls(AlertFileNotifier, {"path": path}) if path else cls()

    def callback(self) -> SyncCallback:
        """The deadline alert's callback (missed_deadline), run by Airflow's executor with the missed run's context.
        The notifier's arguments are stored with the DAG: name a connection id in them, never a secret."""
        path = self.notifier if isinstance(self.notifier, str) or self.notifier is None else self._dotted()
        return SyncCallback(missed_deadline, kwargs={"notifier": path, "notifier_kwargs": dict(self.kwargs)})

    def _dotted(self) -> str:
        assert self.notifier is not None and not isinstance(self.notifier, str)
        return f"{self.notifier.__module__}.{self.notifier.__qualname__}"

    def send(self, context: Mapping[str, Any]) -> None:
        """One alert (the context's `alert`), through a notifier built for it alone."""
        if self.notifier is None:
            log_alert(context)
            return
        from airflow.sdk._shared.module_loading import import_string

        notifier = import_string(self.notifier) if isinstance(self.notifier, str) else self.notifier
        notifier(**self.kwargs)(dict(context))


def deadline_alerts_enabled() -> bool:
    """MILLPOND_DEADLINE_ALERTS: on where a scheduler runs the DAGs (`make up`, compose), off by default."""
    choice = settings.DEADLINE_ALERTS.choice()
    if choice not in ("on", "off"):
        raise settings.SettingError(f"MILLPOND_DEADLINE_ALERTS={choice!r} is neither on nor off. Fix: set one")
    return choice == "on"


def run_deadline(pipeline: Pipeline, alerting: Alerting) -> DeadlineAlert | None:
    """A run not ended the smallest `error_after` after it was queued: its tables may be stale by then (their last
    data commit came before the queue time, unless this run or another writer already wrote them). None without
    goals, or with MILLPOND_DEADLINE_ALERTS off. Airflow queues a backfill's runs together, so its later runs can miss
    this while the first ones run."""
    goals = [table.freshness.error_after for table in pipeline.tables.values() if table.freshness]
    if not goals or not deadline_alerts_enabled():
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=min(goals)),
        callback=alerting.callback(),
        name=f"{pipeline.name}: a run not ended {timedelta(seconds=min(goals))} after it was queued lets a table go stale",
    )


class FreshnessSentinelOperator(BaseOperator):
    """Checks every table with a freshness goal, in every spec that loads, and records and notifies each status
    change (millpond.runs.freshness_watch). Returns each table's status as the task's XCom."""

    def __init__(self, *, alerting: Alerting, **kwargs: Any):
        super().__init__(**kwargs)
        self.alerting = alerting

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from millpond.runs import freshness_watch

        pipelines, broken = [], []
        for path in all_spec_paths():
            try:
                pipelines.append(load_pipeline(path))
            except SpecError as exc:
                broken.append(f"{path}:\n" + "\n".join(exc.problems))
        at = datetime.now(UTC)

        def notify(change: freshness_watch.StatusChange) -> None:
            self.alerting.send({**context, "alert": freshness_alert(change.as_dict())})

        checked_by = str(context.get("run_id") or "airflow")
        with lake_access():  # an object-store lake's AWS_* from the Airflow connection, as every task reads it
            evaluated, changes = freshness_watch.check(pipelines, at, notify, checked_by)
        for change in changes:
            log.info(
                "%s: %s -> %s%s", change.found.table, change.previous, change.found.status,
                f" (sent: {change.alert})" if change.alert else "",
            )  # fmt: skip
        log.info("Checked %d table(s) at %s: %d status change(s)", len(evaluated), at.isoformat(), len(changes))
        if broken:  # the others were checked; a spec that does not load must not silence its tables' alerts
            raise AirflowException(
                "These specs do not load, so their tables' freshness is not checked (their DAGs show why; "
                "`make validate`):\n" + "\n".join(broken)
            )
        return [{"pipeline": pipeline, **found.as_dict()} for pipeline, found in evaluated]
