"""The freshness sentinel's episodes (millpond.runs.freshness_watch) on real Delta tables written by delta-rs: one
alert when a table turns stale, none while it stays stale, one when it recovers, every change recorded in
`_system/freshness`, and a failing notifier sending again at the next check. The sentinel in a real Airflow is in
tests/integration/airflow/test_make_up.py::test_every_run_start_on_a_fresh_lake_succeeds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from millpond.lake import paths
from millpond.runs import freshness_watch
from millpond.spec import load_pipeline

pytestmark = pytest.mark.unit

GOLD = ("gold.device_counts", "gold.activity_hourly")  # activity's tables with a goal: warn 90m, error 2h


def write_gold(table_id: str) -> datetime:
    """One data commit to the table; returns a moment just after it."""
    data = pa.table({"activity": ["walk"], "n": [1]})
    write_deltalake(str(paths.table_path(table_id)), data, mode="append")
    return datetime.now(UTC) + timedelta(seconds=1)


def recorded() -> list[tuple[str, str, str | None, str | None, str]]:
    """(table, status, previous, alert, checked_by) of every row of `_system/freshness`, oldest first."""
    rows = DeltaTable(str(paths.freshness_path())).to_pyarrow_table().to_pylist()
    rows.sort(key=lambda r: (r["checked_at"], r["table"]))
    return [(r["table"], r["status"], r["previous"], r["alert"], r["checked_by"]) for r in rows]


class Inbox:
    """A notifier stand-in that keeps what it was sent, and fails for the tables in `failing`."""

    def __init__(self):
        self.sent: list[tuple[str, str | None]] = []
        self.failing: set[str] = set()

    def __call__(self, change: freshness_watch.StatusChange) -> None:
        if change.found.table in self.failing:
            raise ConnectionError("smtp refused")
        self.sent.append((change.found.table, change.alert))


def test_one_alert_per_stale_episode_and_one_on_recovery_with_every_change_recorded(lake):
    activity = [load_pipeline("activity")]
    inbox = Inbox()
    start = datetime.now(UTC)

    # Nothing written yet: both goals are missed, one alert each; a second check sends and records nothing.
    evaluated, changes = freshness_watch.check(activity, start, inbox, "check-1")
    assert sorted(t for _, t in inbox.sent) == ["stale", "stale"] and {t for t, _ in inbox.sent} == set(GOLD)
    assert {found.table for _, found in evaluated} == set(GOLD)
    freshness_watch.check(activity, start + timedelta(minutes=5), inbox, "check-2")
    assert len(inbox.sent) == 2
    assert [r[4] for r in recorded()] == ["check-1", "check-1"]

    # device_counts written: it recovers (one alert), activity_hourly stays stale (none).
    written = write_gold("gold.device_counts")
    _, changes = freshness_watch.check(activity, written, inbox, "check-3")
    assert inbox.sent[2:] == [("gold.device_counts", "recovered")]
    assert [(c.found.table, c.previous, c.found.status) for c in changes] == [("gold.device_counts", "stale", "fresh")]

    # Aging: warn is recorded, not sent; stale again is a new episode with its own alert.
    freshness_watch.check(activity, written + timedelta(minutes=100), inbox, "check-4")
    assert len(inbox.sent) == 3
    freshness_watch.check(activity, written + timedelta(hours=3), inbox, "check-5")
    freshness_watch.check(activity, written + timedelta(hours=4), inbox, "check-6")
    assert inbox.sent[3:] == [("gold.device_counts", "stale")]

    assert [r for r in recorded() if r[0] == "gold.device_counts"] == [
        ("gold.device_counts", "stale", None, "stale", "check-1"),
        ("gold.device_counts", "fresh", "stale", "recovered", "check-3"),
        ("gold.device_counts", "warn", "fresh", None, "check-4"),
        ("gold.device_counts", "stale", "warn", "stale", "check-5"),
    ]
    assert [r for r in recorded() if r[0] == "gold.activity_hourly"] == [
        ("gold.activity_hourly", "stale", None, "stale", "check-1")
    ]


def test_a_failing_notifier_leaves_its_change_unrecorded_so_the_next_check_sends_it_again(lake):
    activity = [load_pipeline("activity")]
    inbox = Inbox()
    inbox.failing = {"gold.activity_hourly"}
    now = datetime.now(UTC)
    with pytest.raises(freshness_watch.AlertError, match=r"gold\.activity_hourly \(stale\): ConnectionError"):
        freshness_watch.check(activity, now, inbox, "check-1")
    # The other table's alert went out and is recorded; the failed one is not.
    assert inbox.sent == [("gold.device_counts", "stale")]
    assert [r[:2] for r in recorded()] == [("gold.device_counts", "stale")]

    inbox.failing.clear()
    freshness_watch.check(activity, now + timedelta(minutes=5), inbox, "check-2")
    assert inbox.sent[1:] == [("gold.activity_hourly", "stale")]
    assert freshness_watch.last_statuses() == {
        "gold.device_counts": ("activity", "stale"),
        "gold.activity_hourly": ("activity", "stale"),
    }


def test_a_table_no_spec_checks_any_more_closes_its_episode_and_a_returning_goal_alerts_anew(lake):
    activity = [load_pipeline("activity")]
    inbox = Inbox()
    now = datetime.now(UTC)
    freshness_watch.check(activity, now, inbox, "check-1")
    # The goals are gone (a spec edited, or broken): one `unchecked` row each, no alert.
    evaluated, changes = freshness_watch.check([], now + timedelta(minutes=5), inbox, "check-2")
    assert evaluated == [] and len(inbox.sent) == 2
    assert {(c.found.table, c.previous, c.found.status, c.alert) for c in changes} == {
        (t, "stale", "unchecked", None) for t in GOLD
    }
    freshness_watch.check([], now + timedelta(minutes=10), inbox, "check-3")  # nothing more to close
    assert len(recorded()) == 4
    # The goals are back while the tables are still stale: a new episode, alerted again.
    freshness_watch.check(activity, now + timedelta(minutes=15), inbox, "check-4")
    assert inbox.sent[2:] == [(t, "stale") for t in GOLD]
