"""The event log is written by delta-rs and read by Spark: both must agree on every row, past Delta checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from millpond.lake import paths
from millpond.lake.delta_log import table_state
from millpond.runs import event_log
from millpond.runs.run_record import RunContext, TableResult

pytestmark = pytest.mark.integration


def test_rows_appended_without_spark_read_back_in_spark_across_delta_checkpoints(spark, lake):
    start = datetime(2026, 11, 1, 1, tzinfo=UTC)
    runs = 21  # versions 0..20: Delta checkpoints at 10 and 20, JSON commits after them
    for n in range(runs):
        run = RunContext(f"run-{n:02d}", "scheduled", start + timedelta(hours=n), start + timedelta(hours=n + 1))
        results = [
            TableResult(
                "bronze.activity",
                "bronze",
                start,
                ended_at=start + timedelta(seconds=n),
                rows_in=n,
                rows_written=n,
                version_before=n - 1,
                version_after=n,
                outcome="succeeded",
            ),
            TableResult("silver.activity", "silver", start, ended_at=start, outcome="failed", error=f"boom {n}"),
        ]
        assert event_log.append("activity", run, results) == n
    log = paths.event_log_path()
    assert (log / "_delta_log" / "_last_checkpoint").exists()
    rows = spark.read.format("delta").load(str(log)).collect()
    assert len(rows) == 2 * runs
    bronze = {r.run_id: r for r in rows if r.table == "bronze.activity"}
    assert [bronze[f"run-{n:02d}"].rows_written for n in range(runs)] == list(range(runs))
    last = bronze["run-20"]
    assert (last.trigger, last.data_interval_start.hour, last.version_before, last.pipeline) == (
        "scheduled",
        21 % 24,
        19,
        "activity",
    )
    assert {r.error for r in rows if r.table == "silver.activity"} == {f"boom {n}" for n in range(runs)}
    assert table_state(log).rows == 2 * runs  # `millpond status` reads the same log without a JVM
