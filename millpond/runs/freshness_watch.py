"""The freshness sentinel's memory: each table's status changes, one Delta row each, under `_system/freshness`, and
which of them alert (once when a table turns stale, once when it stops being stale).

Why a table and not the sentinel's own state: the sentinel is a scheduled DAG whose runs may fail, retry or be
cleared, and whose schedule keeps going while a pipeline's DAG is paused or its runs fail. The last status recorded
per table says where each stale episode stands whatever happened to the runs in between, and a user queries the
history like any other table. Recorded by delta-rs (no JVM), as the event log is.

Notify, then record: a notifier that fails leaves the change unrecorded, so the next check sends it again if the
table is still in that state, and the failure fails the check. A table no spec checks any more gets an `unchecked`
row, which closes its episode: if its goal comes back while it is stale, that is a new episode, with its alert.
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
    ("status", "string"),  # fresh, warn or stale (millpond.lake.freshness), or unchecked
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


UNCHECKED = "unchecked"  # a table recorded before that no spec that loads gives a goal now: its episode is closed


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
        if self.previous == "stale" and self.found.status not in ("stale", UNCHECKED):
            return "recovered"
        return None

    def as_dict(self) -> dict[str, Any]:
        """What a notifier's templates see as `freshness`: the table's status and this change."""
        return {"pipeline": self.pipeline, **self.found.as_dict(), "previous": self.previous, "alert": self.alert}


def last_statuses(root: paths.LakePath | None = None) -> dict[str, tuple[str, str]]:
    """Each table's last recorded (pipeline, status), by table id: the newest `checked_at` (the sentinel runs one
    check at a time)."""
    table = system_tables.open_table(paths.freshness_path(root))
    if table is None:
        return {}
    rows = table.to_pyarrow_table(columns=["checked_at", "table", "pipeline", "status"]).to_pylist()
    rows.sort(key=lambda row: row["checked_at"])
    return {row["table"]: (row["pipeline"], row["status"]) for row in rows}


def status_changes(evaluated: Iterable[tuple[str, TableFreshness]]) -> list[StatusChange]:
    """Every evaluated table (pipeline name, its freshness) whose status is not the one last recorded for it, and
    every table recorded before that was not evaluated now (its goal removed, its spec broken): `unchecked`."""
    recorded = last_statuses()
    seen: set[str] = set()
    changes = []
    for pipeline, found in evaluated:
        if found.table in seen:  # two pipelines naming one table: `millpond validate` refuses that; one alert
            continue
        seen.add(found.table)
        previous = recorded.get(found.table, (pipeline, None))[1]
        if previous != found.status:
            changes.append(StatusChange(pipeline, found, None if previous == UNCHECKED else previous))
    for table_id, (pipeline, status) in recorded.items():
        if table_id not in seen and status != UNCHECKED:
            gone = TableFreshness(table_id, UNCHECKED, "", None, None, None, None, "no spec that loads has its goal")
            changes.append(StatusChange(pipeline, gone, status))
    return changes


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
