"""How old each table with a freshness goal is, from its Delta log alone (no JVM): fresh, warn or stale.

Why not the newest commit: an OPTIMIZE, a VACUUM or a property change commits without changing data, and a
reprocess of an old interval rewrites old rows; neither says anything about whether the newest data arrived (dbt's
source freshness counts such commits; Dagster's asset freshness turns fresh when an old partition is backfilled).
So the age counts from the newest commit that added or removed data (`dataChange`) and is not a reprocess's slice
(its Delta `txn` app id is `millpond-reprocess:<interval>`), or, with `event_time`, from the newest value of that
column the table holds (the `maxValues` statistics Delta keeps for each file), which a reprocess of an old interval
cannot move.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from millpond.lake import paths
from millpond.lake.delta_log import latest_version, live_files
from millpond.lake.paths import LakePath
from millpond.spec import Freshness, Pipeline, Table

REPROCESS_APP_PREFIX = "millpond-reprocess:"  # millpond.driver.reprocess's commits (docs/reprocess.md)
STATUSES = ("fresh", "warn", "stale")


@dataclass
class TableFreshness:
    """One table's status at `at`: its age counts from `since` (None: no data yet, so stale)."""

    table: str
    status: str
    basis: str  # "last data commit" or "newest <column>"
    since: str | None
    age_seconds: float | None
    warn_at: str | None
    stale_at: str | None
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def pipeline_freshness(pipeline: Pipeline, at: datetime) -> list[TableFreshness]:
    """Every table of the pipeline with a freshness goal, evaluated at `at` (an aware datetime)."""
    return [table_freshness(table, table.freshness, at) for table in pipeline.tables.values() if table.freshness]


def table_freshness(table: Table, goal: Freshness, at: datetime) -> TableFreshness:
    location = paths.table_path(table.id)
    if goal.event_time:
        basis = f"newest {goal.event_time}"
        since, note = newest_event_time(location, goal.event_time)
    else:
        basis = "last data commit"
        since, note = last_data_commit(location), ""
    if since is None:
        if not note and not goal.event_time and latest_version(location) >= 0:
            note = "no data commit among the commits the log still holds (older ones were cleaned up)"
        return TableFreshness(table.id, "stale", basis, None, None, None, None, note or "no data yet")
    age = (at - since).total_seconds()
    status = "fresh" if age < goal.warn_after else "warn" if age < goal.error_after else "stale"
    return TableFreshness(
        table.id,
        status,
        basis,
        since.isoformat(),
        round(age, 3),
        (since + timedelta(seconds=goal.warn_after)).isoformat(),
        (since + timedelta(seconds=goal.error_after)).isoformat(),
        note,
    )


def last_data_commit(location: LakePath) -> datetime | None:
    """When the newest commit that changed data (and is not a reprocess's slice) was made, by its commit info's
    timestamp; None when no commit the log still holds did."""
    log = location / "_delta_log"
    if not log.is_dir():
        return None
    commits: list[LakePath] = [p for p in log.glob("*.json") if len(p.name) == 25 and p.name[:20].isdigit()]
    for commit in sorted(commits, key=lambda p: p.name, reverse=True):
        actions = [json.loads(line) for line in commit.read_text(encoding="utf-8").splitlines() if line.strip()]
        if any(str((a.get("txn") or {}).get("appId", "")).startswith(REPROCESS_APP_PREFIX) for a in actions):
            continue
        changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
        if any(change.get("dataChange", True) for change in changes):
            info: dict = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            millis = info.get("inCommitTimestamp") or info.get("timestamp")
            if millis is None:
                millis = commit.stat().st_mtime * 1000
            return datetime.fromtimestamp(int(millis) / 1000, UTC)
    return None


def newest_event_time(location: LakePath, column: str) -> tuple[datetime | None, str]:
    """The newest value of `column` (a dotted name reaches into a struct) over the table's live files, from Delta's
    per-file statistics, and a note when a file carries none for it."""
    found = live_files(location)
    if found is None:
        return None, ""
    newest: datetime | None = None
    missing = 0
    for live in found[1].values():
        value = _stat(live.stats, column)
        if value is None:
            missing += live.rows > 0
            continue
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None, f"{column}'s statistics hold {value!r}, not a time: name a timestamp column"
        moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        newest = moment if newest is None or moment > newest else newest
    note = f"{missing} file(s) without statistics for {column}" if missing else ""
    return newest, note


def _stat(stats: str | None, column: str) -> object | None:
    value: object = (json.loads(stats) if stats else {}).get("maxValues", {})
    for part in column.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
