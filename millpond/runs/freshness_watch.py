"""The freshness sentinel's memory: each table's status changes, one Delta row each, under `_system/freshness`, and
which of them alert (once when a table turns stale, once when it stops being stale).

Why a table and not the sentinel's own state: the sentinel is a scheduled DAG whose runs may fail, retry or be
cleared, and whose schedule keeps going while a pipeline's DAG is paused or its runs fail. The last status recorded
per table says where each stale episode stands whatever happened to the runs in between, and a user queries the
history like any other table. Recorded by delta-rs (no JVM), as the event log is.

Notify, then record: a notifier that fails leaves the change unrecorded, so the next check sends it again (an alert
may come twice, never not at all), and the failure fails the check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from millpond.lake import paths, system_tables
from millpond.lake.freshness import TableFreshness, pipeline_freshness
from millpond.spec import Pipeline

# (column, Spark SQL type), as the event log declares its own.
COLUMNS = (
    ("checked_at", "timestamp"),
    ("pipeline", "string"),
    ("table", "string"),
    ("status", "string"),  # fresh, warn or stale (millpond.lake.freshness)
    ("previous", "string"),  # the status recorded before; null the first time the table was checked
    ("alert", "string"),  # "stale" or "recovered" when this change was notified, else null
    ("basis", "string"),
    ("since", "timestamp"),
    ("age_seconds", "double"),
    ("warn_at", "timestamp"),
    ("stale_at", "timestamp"),
    ("note", "string"),
    ("checked_by", "string"),  # who checked: the sentinel's Airflow run id, or the command
)


class AlertError(RuntimeError):
    """A notifier failed for some changes; they stay unrecorded so the next check sends them again."""


@dataclass(frozen=True)
class StatusChange:
    """A table whose status differs from the last one recorded for it (`previous` None: never recorded)."""

    pipeline: str
    found: TableFreshness
    previous: str | None

    @property
    def alert(self) -> str | None:
        """What to notify: "stale" when a stale episode begins, "recovered" when it ends, else nothing (a move
        between fresh and warn is recorded, not sent). A change is never from a status to itself."""
        if self.found.status == "stale":
            return "stale"
        if self.previous == "stale" and self.found.status != "stale":
            return "recovered"
        return None

    def as_dict(self) -> dict[str, Any]:
        """What a notifier's templates see as `freshness`: the table's status and this change."""
        return {"pipeline": self.pipeline, **self.found.as_dict(), "previous": self.previous, "alert": self.alert}


def last_statuses(root: paths.LakePath | None = None) -> dict[str, str]:
    """Each table's last recorded status, by table id."""
    table = system_tables.open_table(paths.freshness_path(root))
    if table is None:
        return {}
    rows = table.to_pyarrow_table(columns=["checked_at", "table", "status"]).to_pylist()
    latest: dict[str, tuple[datetime, str]] = {}
    for row in rows:
        seen = latest.get(row["table"])
        if seen is None or row["checked_at"] >= seen[0]:
            latest[row["table"]] = (row["checked_at"], row["status"])
    return {table_id: status for table_id, (_, status) in latest.items()}


def status_changes(evaluated: Iterable[tuple[str, TableFreshness]]) -> list[StatusChange]:
    """Every evaluated table (pipeline name, its freshness) whose status is not the one last recorded for it."""
    recorded = last_statuses()
    return [
        StatusChange(pipeline, found, recorded.get(found.table))
        for pipeline, found in evaluated
        if recorded.get(found.table) != found.status
    ]


def check(
    pipelines: Iterable[Pipeline], at: datetime, notify: Callable[[StatusChange], None], checked_by: str
) -> tuple[list[tuple[str, TableFreshness]], list[StatusChange]]:
    """Evaluate every goal at `at`, notify each change that alerts, and record every change whose notification
    (if any) went out. Returns every table's status and the changes; raises AlertError naming the tables whose
    notifier failed, after recording the rest."""
    evaluated = [(pipeline.name, found) for pipeline in pipelines for found in pipeline_freshness(pipeline, at)]
    changes = status_changes(evaluated)
    recorded: list[StatusChange] = []
    failed: list[str] = []
    for change in changes:
        if change.alert:
            try:
                notify(change)
            except Exception as exc:
                failed.append(f"{change.found.table} ({change.alert}): {type(exc).__name__}: {exc}")
                continue
        recorded.append(change)
    if recorded:
        record(recorded, at, checked_by)
    if failed:
        raise AlertError(
            "the notifier failed for: " + "; ".join(failed) + ". These changes are not recorded, so the next check "
            "sends them again. Fix: the notifier's connection or arguments (docs/freshness.md)"
        )
    return evaluated, changes


def record(changes: list[StatusChange], at: datetime, checked_by: str) -> None:
    rows = [
        {
            "checked_at": at,
            "pipeline": change.pipeline,
            "table": change.found.table,
            "status": change.found.status,
            "previous": change.previous,
            "alert": change.alert,
            "basis": change.found.basis,
            "since": _instant(change.found.since),
            "age_seconds": change.found.age_seconds,
            "warn_at": _instant(change.found.warn_at),
            "stale_at": _instant(change.found.stale_at),
            "note": change.found.note,
            "checked_by": checked_by,
        }
        for change in changes
    ]
    system_tables.append(paths.freshness_path(), COLUMNS, rows)


def _instant(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None
