"""Schema drift per json source on real Spark + Delta: rescue (default), add, fail. A new field is never dropped."""

from __future__ import annotations

import json

import pytest
import yaml

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference, read
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration


def use_activity_spec(tmp_path, monkeypatch, drift: str | None, extra_schema: str = "") -> None:
    spec = yaml.safe_load((REPO / "pipelines" / "activity.yaml").read_text())
    if drift:
        spec["sources"]["activity"]["schema_drift"] = drift
    spec["sources"]["activity"]["schema"] += extra_schema
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    (folder / "activity.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))


def land_drifted(folder, name: str, first_index: int, extra: list[dict]) -> None:
    """Well-formed recordings, each with the extra fields given for it."""
    lines = [
        json.dumps(
            {
                "Recorded_At": f"2026-11-01T01:00:{i:02d}.000Z",
                "Device": "nexus4_1",
                "Index": first_index + i,
                "gt": "walk",
                "x": 1.0,
                "y": 2.0,
                "z": 3.0,
                **fields,
            }
        )
        for i, fields in enumerate(extra)
    ]
    (folder / name).write_text("\n".join(lines) + "\n")


def test_rescue_is_the_default_new_fields_kept_as_json(spark, lake):
    folder = lake / "landing" / "activity"
    activity_files(folder, 1, 30, seed=1)
    land_drifted(
        folder, "drift.json", 1000, [{"battery": 87, "fw": {"v": "2.1", "beta": True}}, {"device": "lower"}, {}]
    )
    assert runner.main(["activity", "--tables", "bronze.activity"]) == 0
    bronze = read(spark, "bronze.activity")
    assert bronze.count() == 33 and not paths.quarantine_path("bronze.activity").exists()
    rescued = {r.Index: r._rescued_data for r in bronze.where("Index >= 1000").collect()}
    assert json.loads(rescued[1000]) == {"battery": 87, "fw": {"v": "2.1", "beta": True}}  # types kept
    assert json.loads(rescued[1001]) == {"device": "lower"}  # field names are case-sensitive: not Device
    assert rescued[1002] is None
    assert bronze.where("_rescued_data IS NOT NULL").count() == 2


@pytest.mark.parametrize(
    "line",
    [
        '{"a": 1, "b": "x"}',
        '{ "a" : 1 , "b" : "x" }',  # spaces around every colon, no new field
        '{"a": 1, "extra" : 2}',  # a new key with a space before its colon
        '{"a":1,"extra"\t:2}',  # ... and with a tab
        '{"a": 1, "b": "she said \\": hi", "c": 3}',  # an escaped quote and colon inside a value, then a new key
        '{"a": 1, "b": "x\\" ", "nested": {"c": 1}}',  # a quote then a space inside a value, a new nested key
        '{"a": 1, "b": "x", "c": {"d" : {"e": 1}}}',  # more key marks than keys at the top level
    ],
)
def test_new_top_level_keys_are_found_however_the_line_is_spaced(spark, line):
    """The key count that skips the second parse is exact for any spacing: a new key is never missed."""
    from pyspark.sql.types import StructType

    from millpond.driver import sources

    schema = StructType.fromDDL("a BIGINT, b STRING")
    lines = spark.createDataFrame([(line, "f.json")], f"value STRING, {sources.SOURCE_FILE} STRING")
    row = sources.parse_json_lines(lines, schema).first()
    new = sorted(set(json.loads(line)) - {"a", "b"})
    assert (row[sources.ERROR], sorted(row[sources.NEW_FIELDS] or [])) == (None, new)
    assert (json.loads(row[sources.RESCUED]) if new else None) == ({k: json.loads(line)[k] for k in new} or None)


def test_add_evolves_bronze_and_the_pipeline_keeps_running_through_gold(spark, lake, tmp_path, monkeypatch):
    use_activity_spec(tmp_path, monkeypatch, "add")
    folder = lake / "landing" / "activity"
    activity_files(folder, 1, 30, seed=2)
    assert runner.main(["activity", "--run-id", "before"]) == 0  # every table and checkpoint exists
    land_drifted(folder, "drift-1.json", 1000, [{"battery": 87}, {"battery": 12.5, "fw": {"v": "2.1"}}, {}])
    assert runner.main(["activity", "--layers", "bronze"]) == 0
    bronze = read(spark, "bronze.activity")
    assert dict(bronze.dtypes)["battery"] == "string" and dict(bronze.dtypes)["fw"] == "string"
    new = {r.Index: (r.battery, r.fw) for r in bronze.where("Index >= 1000").collect()}
    assert new == {1000: ("87", None), 1001: ("12.5", '{"v":"2.1"}'), 1002: (None, None)}
    assert bronze.where("Index < 1000 AND battery IS NULL").count() == 30  # existing rows read null
    # A later file with and without the field, a name that cannot be a column, and one that clashes with Device.
    land_drifted(folder, "drift-2.json", 2000, [{"battery": 50, "odd name": 1, "DEVICE": "x"}, {}])
    activity_files(folder, 1, 30, seed=3)
    # Silver's Delta stream now reads across bronze's schema change (and gold across silver's): no restart error.
    assert runner.main(["activity", "--run-id", "again"]) == 0
    bronze = read(spark, "bronze.activity")
    row = bronze.where("Index = 2000").collect()[0]
    assert row.battery == "50" and json.loads(row._rescued_data) == {"odd name": 1, "DEVICE": "x"}
    silver = {r.Index: r.battery for r in read(spark, "silver.activity").where("Index >= 1000").collect()}
    assert silver == {1000: "87", 1001: "12.5", 1002: None, 2000: "50", 2001: None}
    assert_matches_reference(spark, activity_reference(folder))  # bronze, silver and gold are exact
    log = spark.read.format("delta").load(str(paths.event_log_path())).where("run_id = 'again'").collect()
    assert sorted((r.table, r.outcome) for r in log) == [
        ("bronze.activity", "succeeded"),
        ("gold.activity_hourly", "succeeded"),
        ("gold.device_counts", "succeeded"),
        ("silver.activity", "succeeded"),
    ]


def test_fail_stops_before_writing_and_after_the_fix_the_batch_is_ingested_once(
    spark, lake, tmp_path, monkeypatch, capsys
):
    use_activity_spec(tmp_path, monkeypatch, "fail")
    folder = lake / "landing" / "activity"
    activity_files(folder, 1, 30, seed=4)
    assert runner.main(["activity", "--layers", "bronze"]) == 0
    capsys.readouterr()
    land_drifted(folder, "drift.json", 1000, [{"battery": 87}, {}])
    activity_files(folder, 1, 30, seed=5)  # a clean file in the same batch is held back too
    assert runner.main(["activity", "--run-id", "drifted"]) == 1
    err = capsys.readouterr().err
    spec_file = tmp_path / "specs" / "activity.yaml"
    assert "table bronze.activity failed: schema drift in source landing.activity: new field(s) battery (in " in err
    assert "drift.json)" in err and "schema_drift: fail, so nothing of this batch was written" in err
    assert f"Fix: add battery to sources.activity.schema in {spec_file}" in err
    assert read(spark, "bronze.activity").count() == 30
    log = {
        r.table: r
        for r in spark.read.format("delta").load(str(paths.event_log_path())).where("run_id = 'drifted'").collect()
    }
    assert log["bronze.activity"].outcome == "failed" and "battery" in log["bronze.activity"].error
    assert log["silver.activity"].outcome == "skipped"

    assert runner.main(["activity", "--layers", "bronze"]) == 1  # unchanged spec: the batch fails again, unwritten
    assert read(spark, "bronze.activity").count() == 30

    use_activity_spec(tmp_path, monkeypatch, "fail", extra_schema=", battery BIGINT")
    assert runner.main(["activity"]) == 0
    bronze = read(spark, "bronze.activity")
    assert bronze.count() == 62  # both held-back files, once
    assert dict(bronze.dtypes)["battery"] == "bigint"
    assert {r.Index: r.battery for r in bronze.where("Index >= 1000").collect()} == {1000: 87, 1001: None}
    assert_matches_reference(spark, activity_reference(folder))
