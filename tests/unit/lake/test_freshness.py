"""millpond.lake.freshness on real Delta tables (written by delta-rs): which commits make a table younger, the newest
event time from Delta's statistics, the three statuses, and the spec's `freshness:` field.

A Spark run, an OPTIMIZE by Spark and `millpond freshness` itself are tested in tests/integration/pipelines/
test_runner.py::test_a_run_with_nothing_new_writes_nothing_and_the_gold_tables_age_from_the_run_that_wrote."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from millpond import settings
from millpond.lake import paths
from millpond.lake.freshness import last_data_commit, newest_event_time, table_freshness
from millpond.spec import Freshness, SpecError, load_pipeline

pytestmark = pytest.mark.unit
HOUR = datetime(2026, 11, 1, 2, tzinfo=UTC)


def gold(lake) -> str:
    return str(paths.table_path("gold.activity_hourly"))


def append(location: str, hours: list[datetime], app_id: str | None = None, mode: str = "append") -> datetime:
    """One commit of rows at `hours`; returns a moment just after it."""
    data = pa.table({"hour": pa.array(hours, pa.timestamp("us", tz="UTC")), "recordings": [1] * len(hours)})
    transactions = [Transaction(app_id, 1)] if app_id else None
    write_deltalake(location, data, mode=mode, commit_properties=CommitProperties(app_transactions=transactions))
    time.sleep(0.01)
    return datetime.now(UTC)


def test_only_a_commit_that_changes_data_and_is_not_a_reprocess_makes_a_table_younger(lake):
    location = gold(lake)
    assert last_data_commit(paths.table_path("gold.activity_hourly")) is None  # no table yet
    append(location, [HOUR])
    after_first = append(location, [HOUR + timedelta(hours=1)])
    last = last_data_commit(paths.table_path("gold.activity_hourly"))
    assert last is not None and last <= after_first
    DeltaTable(location).optimize.compact()  # rewrites files, dataChange false
    DeltaTable(location).alter.set_table_properties({"delta.logRetentionDuration": "interval 31 days"})
    append(location, [HOUR], app_id="millpond-reprocess:2026-11-01T02:00:00Z/2026-11-01T03:00:00Z")
    assert len(DeltaTable(location).history()) == 5
    assert last_data_commit(paths.table_path("gold.activity_hourly")) == last
    append(location, [HOUR + timedelta(hours=2)], app_id="millpond:a-query-id")  # a streaming batch
    assert last_data_commit(paths.table_path("gold.activity_hourly")) > last  # type: ignore[operator]


def test_the_newest_event_time_comes_from_the_statistics_and_an_old_interval_rewritten_does_not_move_it(lake):
    location = gold(lake)
    append(location, [HOUR, HOUR + timedelta(hours=3)])
    append(location, [HOUR + timedelta(hours=1)])
    assert newest_event_time(paths.table_path("gold.activity_hourly"), "hour") == (HOUR + timedelta(hours=3), "")
    append(location, [HOUR], mode="overwrite")  # everything replaced by an old hour only
    assert newest_event_time(paths.table_path("gold.activity_hourly"), "hour")[0] == HOUR
    assert newest_event_time(paths.table_path("gold.activity_hourly"), "no_such_column") == (
        None,
        "1 file(s) without statistics for no_such_column",
    )


def test_a_table_is_fresh_then_warn_then_stale_and_with_no_data_stale(lake):
    table = load_pipeline("activity").tables["gold.activity_hourly"]
    goal = Freshness(warn_after=90 * 60, error_after=2 * 3600, event_time="hour")
    assert table_freshness(table, goal, HOUR).status == "stale"  # no table, no data
    append(gold(lake), [HOUR])
    statuses = [table_freshness(table, goal, HOUR + timedelta(minutes=m)).status for m in (0, 89, 90, 119, 120)]
    assert statuses == ["fresh", "fresh", "warn", "warn", "stale"]
    late = table_freshness(table, goal, HOUR + timedelta(hours=3))
    assert (late.age_seconds, late.stale_at) == (3 * 3600, (HOUR + timedelta(hours=2)).isoformat())


@pytest.mark.parametrize(
    ("freshness", "problem"),
    [
        ("{warn_after: 90m, error_after: 2 hours}", None),
        ("{error_after: 1d, event_time: hour}", None),
        ("{warn_after: 3h, error_after: 2h}", "warn_after is longer than error_after"),
        ("{error_after: soon}", "'soon' is not a duration"),
        ("{warn_after: 1h}", "error_after"),
        ("{error_after: 0m}", "always be stale"),
        ("{error_after: 2h, after: 1h}", "after"),
    ],
)
def test_a_freshness_goal_is_read_from_the_spec_or_refused_naming_the_field(tmp_path, monkeypatch, freshness, problem):
    spec = (settings.project_root() / "pipelines" / "activity.yaml").read_text()
    spec = spec.replace("freshness: {warn_after: 90m, error_after: 2h}   #", f"freshness: {freshness}   #", 1)
    (tmp_path / "activity.yaml").write_text(spec)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(tmp_path))
    if problem is None:
        goal = load_pipeline("activity").tables["gold.device_counts"].freshness
        assert goal is not None and goal.error_after in (7200, 86400)
        return
    with pytest.raises(SpecError) as refused:
        load_pipeline("activity")
    assert "tables.gold.device_counts.freshness" in str(refused.value) and problem in str(refused.value)
