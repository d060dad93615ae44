"""The record of an unfinished reprocess: each table struck off as it lands, the record gone when none is owed."""

from __future__ import annotations

import pytest

from millpond.lake import pending_reprocess

pytestmark = pytest.mark.unit

HOUR, DAY = "2026-11-01T02:00:00Z/2026-11-01T03:00:00Z", "2026-11-01T00:00:00Z/2026-11-02T00:00:00Z"


def owing() -> list[tuple[str, list[str]]]:
    return [(e["interval"], e["tables"]) for e in pending_reprocess.pending("activity")]


def test_tables_are_struck_off_as_they_land_and_intervals_are_kept_apart(lake):
    pending_reprocess.begin("activity", HOUR, ["bronze.activity", "silver.activity", "gold.device_counts"])
    pending_reprocess.begin("activity", DAY, ["gold.device_counts"])
    pending_reprocess.begin("activity", HOUR, ["silver.activity", "gold.activity_hourly"])  # a rerun owes more
    pending_reprocess.done("activity", HOUR, "bronze.activity")
    assert owing() == [
        (HOUR, ["silver.activity", "gold.device_counts", "gold.activity_hourly"]),
        (DAY, ["gold.device_counts"]),
    ]
    assert pending_reprocess.pending("clicks") == []
    for table in ("silver.activity", "gold.device_counts", "gold.activity_hourly"):
        pending_reprocess.done("activity", HOUR, table)
    pending_reprocess.done("activity", DAY, "gold.device_counts")
    assert pending_reprocess.pending("activity") == []
    assert not pending_reprocess.marker_path("activity").exists()


def test_a_table_rebuilt_whole_stays_owed_where_its_upstream_still_owes_the_interval(lake):
    """Airflow's gold task may rebuild gold while the ingest task's reprocess of the hour is unfinished: that gold
    read silver's old rows of the hour, so it must stay owed there (and only there)."""
    pending_reprocess.begin("activity", HOUR, ["silver.activity", "gold.device_counts"])
    pending_reprocess.begin("activity", DAY, ["gold.device_counts"])
    pending_reprocess.rebuilt("activity", "gold.device_counts", {"bronze.activity", "silver.activity"})
    assert owing() == [(HOUR, ["silver.activity", "gold.device_counts"])]


def test_the_permission_to_remove_missing_files_rows_is_the_latest_request_s(lake):
    """The run finishing a reprocess reads the permission its request gave; a new request replaces it."""
    pending_reprocess.begin("activity", HOUR, ["bronze.activity", "silver.activity"], allow_missing_files=True)
    assert [e["allow_missing_files"] for e in pending_reprocess.pending("activity")] == [True]
    pending_reprocess.begin("activity", HOUR, ["silver.activity"])
    assert [e["allow_missing_files"] for e in pending_reprocess.pending("activity")] == [False]


def test_a_table_still_owed_keeps_its_delta_transaction_version_and_any_other_gets_a_higher_one(lake):
    """Delta skips a commit whose txnVersion is at or below the app's committed one. A table the interval still owes
    may have the crashed run's write in flight (the engine finishes it): the next run, whether it finishes the record
    or was asked for the interval again (an Airflow retry), must write it under the same version so one of the two
    is skipped. A table already struck off must get a higher version, or Delta would skip its new slice."""
    first = pending_reprocess.begin("activity", HOUR, ["bronze.activity", "silver.activity"])
    pending_reprocess.done("activity", HOUR, "bronze.activity")
    again = pending_reprocess.begin("activity", HOUR, ["bronze.activity", "silver.activity"])
    assert again["silver.activity"] == first["silver.activity"]
    assert again["bronze.activity"] > max(first.values())


def test_a_new_version_is_above_the_one_the_table_committed_whatever_the_clock_says(lake):
    """A clock behind the last writer's must not give a version Delta would skip."""
    ahead = 10**18  # microseconds far in the future: the table was written by a host whose clock runs ahead
    versions = pending_reprocess.begin("activity", HOUR, ["silver.activity"], committed={"silver.activity": ahead})
    assert versions["silver.activity"] > ahead


def test_the_other_intervals_a_reprocess_rebuilds_are_kept_until_it_is_finished(lake):
    """Once bronze's files are replaced whole, its old rows in the intervals a correction moved them out of are gone:
    only the record tells the run that finishes the reprocess to rebuild those downstream too. A rerun that finds
    more adds to them; they go with the entry."""
    earlier, later = "2026-11-01T01:00:00Z/2026-11-01T02:00:00Z", "2026-11-01T03:00:00Z/2026-11-01T04:00:00Z"
    pending_reprocess.begin("activity", HOUR, ["bronze.activity", "silver.activity"], other_intervals=[earlier])
    pending_reprocess.done("activity", HOUR, "bronze.activity")
    pending_reprocess.begin("activity", HOUR, ["silver.activity"], other_intervals=[later])
    assert pending_reprocess.other_intervals("activity", HOUR) == [earlier, later]
    assert pending_reprocess.other_intervals("activity", DAY) == []
    pending_reprocess.done("activity", HOUR, "silver.activity")
    assert pending_reprocess.other_intervals("activity", HOUR) == []
