"""The record of an unfinished reprocess: each table struck off as it lands, the record gone when none is owed."""

from __future__ import annotations

import pytest

from millpond.lake import pending_reprocess

pytestmark = pytest.mark.unit

HOUR, DAY = "2026-11-01T02:00:00Z/2026-11-01T03:00:00Z", "2026-11-01T00:00:00Z/2026-11-02T00:00:00Z"


def test_tables_are_struck_off_as_they_land_and_intervals_are_kept_apart(lake):
    pending_reprocess.begin("activity", HOUR, ["bronze.activity", "silver.activity", "gold.device_counts"])
    pending_reprocess.begin("activity", DAY, ["gold.device_counts"])
    pending_reprocess.begin("activity", HOUR, ["silver.activity", "gold.activity_hourly"])  # a rerun owes more
    pending_reprocess.done("activity", HOUR, "bronze.activity")
    assert pending_reprocess.pending("activity") == [
        {"interval": HOUR, "tables": ["silver.activity", "gold.device_counts", "gold.activity_hourly"]},
        {"interval": DAY, "tables": ["gold.device_counts"]},
    ]
    assert pending_reprocess.pending("clicks") == []
    for table in ("silver.activity", "gold.device_counts", "gold.activity_hourly"):
        pending_reprocess.done("activity", HOUR, table)
    pending_reprocess.done("activity", DAY, "gold.device_counts")
    assert pending_reprocess.pending("activity") == []
    assert not pending_reprocess.marker_path("activity").exists()
