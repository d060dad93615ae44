"""`millpond run --reprocess START/END` on real Spark + Delta: one hour re-delivered with corrected content under the
same names, rebuilt in every table, each then equal to the plain-Python reference over the landing files as they
are now; the live checkpoint keeps ingesting new files exactly once."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from millpond.dev.sample_data import ACTIVITY_EPOCH, SECONDS_PER_FILE, activity_files, land_file
from millpond.driver import runner
from millpond.lake import paths, pending_reprocess
from millpond.lake.delta_log import latest_version
from millpond.spec.reprocess import parse_interval
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference, read
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

HOUR_1 = "2026-11-01T01:00:00Z/2026-11-01T02:00:00Z"
FILES_PER_HOUR = 3600 // SECONDS_PER_FILE
SLICED = ("bronze.activity", "silver.activity")
TABLES = (*SLICED, "gold.device_counts", "gold.activity_hourly")


def landing(lake: Path) -> Path:
    return lake / "landing" / "activity"


def redeliver_hour_1(lake: Path, seed: int) -> None:
    """Hour 1's files again under the same names with other content; one of them removed, one new file added."""
    activity_files(landing(lake), FILES_PER_HOUR, 60, duplicates=0.1, malformed=0.05, seed=seed, start_index=12)
    (landing(lake) / "activity-000020.json").unlink()
    late = ACTIVITY_EPOCH + timedelta(hours=1, minutes=30)
    rows = [
        {
            "Recorded_At": (late + timedelta(seconds=s)).isoformat().replace("+00:00", "Z"),
            "Device": "late_1",
            "Index": 10_000 + s,
            "Model": "late",
            "User": "u",
            "gt": "walk",
            "x": 1.0,
            "y": 2.0,
            "z": 3.0,
        }
        for s in range(25)
    ]
    land_file(landing(lake), "activity-late-hour-1.json", [json.dumps(r) for r in rows] + ["{not json"])


def event_log(spark, run_id):
    df = spark.read.format("delta").load(str(paths.event_log_path()))
    return {r.table: r for r in df.where(df.run_id == run_id).collect()}


def test_a_redelivered_hour_is_rebuilt_in_every_table_and_later_files_are_read_once(spark, lake, backend):
    """On both backends: on the engine the slices are read and replaced through the run's Connect session."""
    activity_files(landing(lake), 4 * FILES_PER_HOUR, 60, duplicates=0.05, malformed=0.02, seed=1)
    backend.succeed("--run-id", "first")
    assert_matches_reference(spark, activity_reference(landing(lake)))
    outside = (
        read(spark, "silver.activity")
        .where("Recorded_At < '2026-11-01 01:00:00' OR Recorded_At >= '2026-11-01 02:00:00'")
        .orderBy("Device", "Index")
        .collect()
    )

    redeliver_hour_1(lake, seed=7)
    # One of hour 1's files is gone from landing: its rows are not deleted unless the user says so. The run stops
    # before it drains anything, naming the file, and every table stays at its version.
    gone = str(landing(lake) / "activity-000020.json")
    versions = {t: latest_version(paths.table_path(t)) for t in TABLES}
    code, _, err = backend.run("--reprocess", HOUR_1, "--run-id", "refused")
    assert code == 1, err
    assert f"are no longer in landing: {gone}. Nothing was replaced" in err and "--allow-missing-files" in err
    assert {t: latest_version(paths.table_path(t)) for t in TABLES} == versions
    assert not pending_reprocess.pending("activity")
    said = backend.succeed("--reprocess", HOUR_1, "--allow-missing-files", "--run-id", "reprocess")
    assert f"no longer in landing, and their quarantined lines (--allow-missing-files): {gone}" in said
    assert_matches_reference(spark, activity_reference(landing(lake)))
    assert (
        read(spark, "silver.activity")
        .where("Recorded_At < '2026-11-01 01:00:00' OR Recorded_At >= '2026-11-01 02:00:00'")
        .orderBy("Device", "Index")
        .collect()
        == outside
    )
    log = event_log(spark, "reprocess")
    assert {t: (str(r.reprocess_start), str(r.reprocess_end)) for t, r in log.items()} == {
        t: ("2026-11-01 01:00:00", "2026-11-01 02:00:00") for t in log
    }
    assert log["bronze.activity"].rows_in == 25 + 1  # the stream read the one new file, once
    assert log["silver.activity"].rows_replaced > 0

    # The next scheduled run: nothing new (the re-delivered names were seen), then a new round read exactly once.
    backend.succeed("--run-id", "after")
    assert event_log(spark, "after")["bronze.activity"].rows_in == 0
    activity_files(landing(lake), 2, 60, duplicates=0.05, malformed=0.02, seed=3, start_index=4 * FILES_PER_HOUR)
    backend.succeed("--run-id", "later")
    assert event_log(spark, "later")["bronze.activity"].rows_in == 120
    assert_matches_reference(spark, activity_reference(landing(lake)))

    # The same reprocess again changes nothing a user reads (gold's means are compared with the reference's
    # tolerance: Spark sums a mean's values in no fixed order).
    before = {t: sorted(map(str, read(spark, t).drop("_ingested_at").collect())) for t in SLICED}
    backend.succeed("--reprocess", HOUR_1, "--run-id", "again")
    assert {t: sorted(map(str, read(spark, t).drop("_ingested_at").collect())) for t in SLICED} == before
    assert_matches_reference(spark, activity_reference(landing(lake)))
    assert not pending_reprocess.pending("activity")


def silver_quarantine(spark) -> list[str]:
    path = paths.quarantine_path("silver.activity")
    if latest_version(path) < 0:
        return []
    return sorted(r.rule for r in spark.read.format("delta").load(str(path)).collect())


def test_the_gate_applies_to_the_slice_and_an_open_interval_is_refused(spark, lake, capsys):
    activity_files(landing(lake), 3 * FILES_PER_HOUR, 40, seed=2)
    assert runner.main(["activity", "--run-id", "first"]) == 0
    tables = TABLES
    before = {t: latest_version(paths.table_path(t)) for t in tables}

    # Silver's watermark is 01:59 (the newest recording minus an hour): hour 2 may still receive rows.
    capsys.readouterr()
    assert runner.main(["activity", "--reprocess", "2026-11-01T01:30:00Z/2026-11-01T02:30:00Z"]) == 2
    refused = capsys.readouterr().err
    assert (
        "silver.activity: the interval ends at 2026-11-01T02:30:00Z, after the table's watermark 2026-11-01T01:5"
        in refused
    )
    assert "Fix: reprocess an interval ending at or before the watermark" in refused
    # An interval with no rows at all changes nothing and owes nothing.
    assert runner.main(["activity", "--reprocess", "2026-10-31T00:00:00Z/2026-10-31T01:00:00Z"]) == 0
    assert {t: latest_version(paths.table_path(t)) for t in tables} == before
    assert not pending_reprocess.pending("activity")

    # A sub-second reprocess that a crash left owing gold: the next ordinary run reads the interval back as it was
    # given and finishes it (its bounds were once cut to whole seconds, read back as empty, and every run exited 2).
    sub_second = parse_interval("2026-11-01T00:30:00.250Z/2026-11-01T00:30:00.750Z")
    pending_reprocess.begin("activity", sub_second.text, ["gold.device_counts"])
    capsys.readouterr()
    assert runner.main(["activity", "--run-id", "after-sub-second"]) == 0
    assert f"finishing the reprocess of {sub_second.text} for gold.device_counts first" in capsys.readouterr().out
    assert not pending_reprocess.pending("activity")
    assert_matches_reference(spark, activity_reference(landing(lake)))

    # Hour 0 re-delivered with two recordings out of range: the suite's `drop` rule sets them aside...
    file = landing(lake) / "activity-000003.json"
    original = file.read_text().splitlines()
    wild = [json.dumps(json.loads(line) | {"x": 99.0}) for line in original[:2]]
    land_file(landing(lake), file.name, [*wild, *original[2:]])
    hour_0 = "2026-11-01T00:00:00Z/2026-11-01T01:00:00Z"
    assert runner.main(["activity", "--reprocess", hour_0]) == 0
    assert silver_quarantine(spark) == ["expect_column_values_to_be_between(x)"] * 2
    keys = {(r.Device, r.Index) for r in read(spark, "silver.activity").collect()}
    assert {(json.loads(line)["Device"], json.loads(line)["Index"]) for line in original[:2]} & keys == set()
    # ... and once the file is corrected, the next reprocess takes them back out of the quarantine.
    land_file(landing(lake), file.name, original)
    assert runner.main(["activity", "--reprocess", hour_0]) == 0
    assert silver_quarantine(spark) == []
    assert_matches_reference(spark, activity_reference(landing(lake)))
    before = {t: latest_version(paths.table_path(t)) for t in tables}

    # Hour 0 re-delivered with an activity the suite does not allow (a `fail` expectation): nothing is written.
    lines = file.read_text().splitlines()
    record = json.loads(lines[0]) | {"gt": "fly"}
    land_file(landing(lake), file.name, [json.dumps(record), *lines[1:]])
    capsys.readouterr()
    assert runner.main(["activity", "--reprocess", hour_0]) == 4
    assert "expectation" in capsys.readouterr().err
    assert {t: latest_version(paths.table_path(t)) for t in tables} == before
    assert not pending_reprocess.pending("activity")


def test_a_transform_function_that_rewrites_the_event_time_is_refused_before_any_slice(spark, lake, tmp_path, capsys):
    """Silver's function truncates the event time to the hour, so silver's row of 00:40 sits at 00:00. A reprocess of
    [00:00, 00:30) would delete silver's rows at 00:00 and rebuild only those read at 00:00-00:29: the rest lost. A
    function's code cannot be read at `millpond validate`, so the reprocess checks the interval's rows first."""
    spec = yaml.safe_load((REPO / "pipelines" / "activity.yaml").read_text())
    spec["tables"]["silver.activity"]["transform"] = {"function": "tests.support.sample_transforms:to_the_hour"}
    path = tmp_path / "activity.yaml"
    path.write_text(yaml.safe_dump(spec))
    activity_files(landing(lake), 3 * FILES_PER_HOUR, 10, seed=4)
    assert runner.main([str(path), "--run-id", "first"]) == 0
    versions = {t: latest_version(paths.table_path(t)) for t in TABLES}
    silver_rows = read(spark, "silver.activity").count()

    capsys.readouterr()
    assert runner.main([str(path), "--reprocess", "2026-11-01T00:00:00Z/2026-11-01T00:30:00Z"]) == 2
    err = capsys.readouterr().err
    assert "silver.activity: its transform (tests.support.sample_transforms:to_the_hour) changes the event-time " in err
    assert "Fix: keep Recorded_At as it is read" in err
    assert {t: latest_version(paths.table_path(t)) for t in TABLES} == versions
    assert read(spark, "silver.activity").count() == silver_rows
    assert not pending_reprocess.pending("activity")
