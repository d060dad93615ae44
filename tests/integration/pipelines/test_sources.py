"""Landing formats, triggers and rate limits on real Spark: csv and parquet sources, once/processingTime."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference, read
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

CSV_SPEC = {
    "pipeline": "readings",
    "schedule": "@daily",
    "start_date": "2026-11-01",
    "sources": {
        "readings": {
            "format": "csv",
            "path": "landing/readings",
            "schema": "sensor STRING, reading DOUBLE, n INT",
            "options": {"header": "true"},
        },
        "archive": {"format": "parquet", "path": "landing/archive", "schema": "sensor STRING, reading DOUBLE"},
    },
    "tables": {
        "bronze.readings": {"from": "landing.readings"},
        "bronze.archive": {"from": "landing.archive"},
    },
}


def use_spec(tmp_path, monkeypatch, spec: dict) -> None:
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    (folder / f"{spec['pipeline']}.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))


def test_csv_lines_with_wrong_field_counts_or_types_are_quarantined(spark, lake, tmp_path, monkeypatch):
    use_spec(tmp_path, monkeypatch, CSV_SPEC)
    landing = lake / "landing" / "readings"
    landing.mkdir(parents=True)
    (landing / "r1.csv").write_text("sensor,reading,n\na,1.5,1\nb,2.5,2\nc,3.5\nd,4.5,4,extra\ne,not-a-number,5\n")
    (lake / "landing" / "archive").mkdir(parents=True)
    staged = tmp_path / "staged"
    frame = spark.createDataFrame([("z", 9.0), ("y", 8.0)], "sensor STRING, reading DOUBLE")
    frame.coalesce(1).write.parquet(str(staged))
    for part in staged.glob("part-*.parquet"):  # land the finished file by rename, like any producer
        part.rename(lake / "landing" / "archive" / part.name)
    assert runner.main(["readings"]) == 0
    good = {(r.sensor, r.reading, r.n) for r in read(spark, "bronze.readings").collect()}
    assert good == {("a", 1.5, 1), ("b", 2.5, 2)}
    quarantine = spark.read.format("delta").load(str(paths.quarantine_path("bronze.readings"))).collect()
    assert sorted(r.raw for r in quarantine) == ["c,3.5", "d,4.5,4,extra", "e,not-a-number,5"]
    assert all("does not match the schema" in r.reason and r.source_file.endswith("r1.csv") for r in quarantine)
    archive = {(r.sensor, r.reading) for r in read(spark, "bronze.archive").collect()}
    assert archive == {("z", 9.0), ("y", 8.0)}


def test_late_file_with_an_old_mtime_is_still_ingested(spark, lake):
    landing = lake / "landing" / "activity"
    activity_files(landing, 2, 200, seed=1)
    assert runner.main(["activity"]) == 0
    late = activity_files(landing, 1, 200, seed=2)[0]
    month_ago = time.time() - 30 * 24 * 3600
    os.utime(late, (month_ago, month_ago))  # copied in with its original, much older, modification time
    assert runner.main(["activity"]) == 0
    assert_matches_reference(spark, activity_reference(landing))
    assert read(spark, "bronze.activity").where(f"_source_file LIKE '%{late.name}'").count() == 200


def test_once_and_processing_time_triggers_and_rate_limits(spark, lake, tmp_path, monkeypatch):
    spec = yaml.safe_load((REPO / "pipelines" / "activity.yaml").read_text())
    spec["sources"]["activity"]["rate_limit"] = {"max_files_per_trigger": 1}
    spec["tables"]["silver.activity"]["trigger"] = "once"
    spec["tables"]["gold.device_counts"]["trigger"] = {"processingTime": "1 second"}
    use_spec(tmp_path, monkeypatch, spec)
    landing = lake / "landing" / "activity"
    activity_files(landing, 3, 200, duplicates=0.1, seed=5)
    assert runner.main(["activity", "--run-id", "limited"]) == 0
    log = {
        r.table: r
        for r in spark.read.format("delta").load(str(paths.event_log_path())).where("run_id = 'limited'").collect()
    }
    assert log["bronze.activity"].micro_batches == 3  # one file per trigger
    assert log["silver.activity"].micro_batches == 1  # once: everything available in one batch
    assert_matches_reference(spark, activity_reference(landing))
