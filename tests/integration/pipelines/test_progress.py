"""Per-batch progress from the StreamingQueryListener: task-log lines, `_system/query_progress`, event-log totals."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from tests.integration.pipelines.test_sources import use_spec
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

RECENT = "spark.sql.streaming.numRecentProgressUpdates"
LINE = re.compile(
    r"^millpond: progress (\S+) batch (\d+): (\d+) rows in [\d.]+s, input [\d,-]+ rows/s, processed "
    r"[\d,-]+ rows/s, state (\d+) rows, watermark (\S+), late (\d+)$",
    re.MULTILINE,
)


def test_every_batch_is_logged_stored_and_counted_though_spark_keeps_only_the_newest(
    spark, lake, tmp_path, monkeypatch, capsys
):
    spec = yaml.safe_load((REPO / "pipelines" / "activity.yaml").read_text())
    spec["sources"]["activity"]["rate_limit"] = {"max_files_per_trigger": 1}
    use_spec(tmp_path, monkeypatch, spec)
    landing = lake / "landing" / "activity"
    activity_files(landing, 4, 300, duplicates=0.1, malformed=0.01, seed=11)
    spark.conf.set(RECENT, "1")  # query.recentProgress would hold the last batch only
    try:
        assert runner.main(["activity", "--run-id", "batches"]) == 0
    finally:
        spark.conf.unset(RECENT)
    reference = activity_reference(landing)
    assert_matches_reference(spark, reference)

    # The task log: one line per micro-batch as it ends, bronze's four one-file batches in order.
    logged = [m.groups() for m in LINE.finditer(capsys.readouterr().out)]
    bronze_lines = [g for g in logged if g[0] == "bronze.activity"]
    assert [int(g[1]) for g in bronze_lines] == [0, 1, 2, 3]
    assert sum(int(g[2]) for g in bronze_lines) == reference.lines

    # `_system/query_progress`: the same batches, one row each, for every table that ran.
    rows = spark.read.format("delta").load(str(paths.query_progress_path())).where("run_id = 'batches'").collect()
    batches = {}
    for row in rows:
        batches.setdefault(row.table, []).append(row)
    assert set(batches) == {"bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly"}
    assert sorted(r.batch_id for r in batches["bronze.activity"]) == [0, 1, 2, 3]
    assert len(rows) == len(logged)
    silver_rows_in = sum(r.input_rows for r in batches["silver.activity"])
    assert silver_rows_in == len(reference.bronze)  # silver read every bronze row once

    # The event log totals come from every batch, not from the one Spark kept.
    events = {
        r.table: r
        for r in spark.read.format("delta").load(str(paths.event_log_path())).where("run_id = 'batches'").collect()
    }
    assert events["bronze.activity"].micro_batches == 4
    assert events["silver.activity"].rows_in == len(reference.bronze)
    assert events["silver.activity"].processed_rows_per_second > 0

    # Silver's watermark (1 hour behind the newest event) as Spark last reported it, in both places.
    newest = max(
        datetime.fromisoformat(r["Recorded_At"].replace("Z", "+00:00"))
        for r in reference.bronze
        if r.get("Recorded_At")
    )
    last = max(batches["silver.activity"], key=lambda r: r.batch_id)
    assert events["silver.activity"].watermark == last.watermark
    assert last.watermark.replace(tzinfo=UTC) == newest - timedelta(hours=1)  # availableNow's last, no-data batch
    assert (newest - timedelta(hours=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z") in {
        g[4] for g in logged if g[0] == "silver.activity"
    }
    assert events["bronze.activity"].watermark is None  # bronze declares no watermark
