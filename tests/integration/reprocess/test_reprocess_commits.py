"""A reprocess's commit made twice lands once: on the engine a killed client's write is finished by the server
while the rerun, which took the freed lock, writes the same slice (issue 47, finding 8)."""

from __future__ import annotations

from datetime import datetime

import pytest

from millpond.driver.reprocess import TXN_APP_ID, Txn, _replace
from millpond.lake import paths, pending_reprocess
from millpond.spec.reprocess import parse_interval

pytestmark = pytest.mark.integration

HOUR_1 = parse_interval("2026-11-01T01:00:00Z/2026-11-01T02:00:00Z")


def rows(spark, *minutes: int):
    return spark.createDataFrame(
        [(f"d{m}", m, datetime(2026, 11, 1, m // 60, m % 60)) for m in minutes],
        "Device STRING, Index BIGINT, Recorded_At TIMESTAMP",
    )


def held(spark, path) -> list[int]:
    return sorted(r.Index for r in spark.read.format("delta").load(str(path)).collect())


def test_both_writers_of_one_slice_append_and_the_table_holds_it_once(spark, lake):
    """The crashed run and its rerun each counted no row of the hour in the table (the server had not committed the
    crashed run's write yet), so both take the append form. Under the reprocess's one Delta transaction the second
    is skipped; a reprocess of the hour asked for again later gets a new version and does replace it."""
    path = paths.table_path("silver.activity")
    rows(spark, 10, 20).write.format("delta").save(str(path))  # hour 0 only
    condition = HOUR_1.slice_sql("Recorded_At")
    app = TXN_APP_ID.format(interval=HOUR_1.text)
    txn = Txn(app, pending_reprocess.begin("activity", HOUR_1.text, ["silver.activity"])["silver.activity"])
    for run in ("crashed", "rerun"):
        _replace(rows(spark, 65, 66), path, condition, f"millpond reprocess {run}", txn, replaces=False)
    assert held(spark, path) == [10, 20, 65, 66]

    pending_reprocess.done("activity", HOUR_1.text, "silver.activity")
    again = Txn(app, pending_reprocess.begin("activity", HOUR_1.text, ["silver.activity"])["silver.activity"])
    _replace(rows(spark, 67), path, condition, "millpond reprocess again", again)
    assert held(spark, path) == [10, 20, 67]
