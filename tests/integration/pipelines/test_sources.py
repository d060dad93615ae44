"""Landing formats, triggers and rate limits on real Spark: csv, parquet and xml sources, once/processingTime."""

from __future__ import annotations

import copy
import os
import time
import xml.etree.ElementTree as ET

import pytest
import yaml

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from millpond.spec import SpecError, load_pipeline
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


XML_SPEC = {
    "pipeline": "readings",
    "schedule": "@daily",
    "start_date": "2026-11-01",
    "sources": {
        "readings": {
            "format": "xml",
            "path": "landing/readings",
            "schema": "sensor STRING, value DOUBLE, n INT NOT NULL",
            "options": {"rowTag": "reading"},
        }
    },
    "tables": {"bronze.readings": {"from": "landing.readings"}},
}


def xml_record(sensor: str, value: str, n: str | None) -> str:
    count = f"<n>{n}</n>" if n is not None else ""
    return f"<reading><sensor>{sensor}</sensor><value>{value}</value>{count}</reading>"


def well_formed_rows(records: list[str]) -> set[tuple[str, float, int]]:
    """The reference, by Python's own XML parser: the records whose fields all read as the schema's types."""
    rows = set()
    for text in records:
        element = ET.fromstring(text)
        try:
            rows.add((element.findtext("sensor"), float(element.findtext("value")), int(element.findtext("n"))))
        except (TypeError, ValueError):
            continue
    return rows


def test_xml_records_are_ingested_and_the_unreadable_ones_quarantined(spark, lake, tmp_path, monkeypatch):
    """The format added as issue 46's proof that a landing format is one module and its name in the spec."""
    spec = copy.deepcopy(XML_SPEC)
    del spec["sources"]["readings"]["options"]
    use_spec(tmp_path, monkeypatch, spec)
    with pytest.raises(SpecError, match=r"sources\.readings\.options\.rowTag: a xml source needs the reader option"):
        load_pipeline("readings", lake_root=lake)

    use_spec(tmp_path, monkeypatch, XML_SPEC)
    landing = lake / "landing" / "readings"
    landing.mkdir(parents=True)
    first = [xml_record("a", "1.5", "1"), xml_record("b", "not-a-number", "2"), xml_record("c", "3.5", None)]
    first += [xml_record(f"s{i}", f"{i}.25", str(i)) for i in range(5)] + [xml_record("x &amp; y", "7", "7")]
    (landing / "r1.xml").write_text("<readings>\n" + "\n".join(first) + "\n</readings>\n")
    # Cut off inside its second record, and a file that is no XML at all: each read as one unreadable record.
    (landing / "r2.xml").write_text("<readings>" + xml_record("t1", "1", "1") + xml_record("t2", "2", "2")[:30])
    (landing / "r3.xml").write_text("not xml at all\n")
    assert runner.main(["readings"]) == 0
    expected = well_formed_rows([*first, xml_record("t1", "1", "1")])
    assert {(r.sensor, r.value, r.n) for r in read(spark, "bronze.readings").collect()} == expected
    assert ("x & y", 7.0, 7) in expected
    quarantine = spark.read.format("delta").load(str(paths.quarantine_path("bronze.readings"))).collect()
    reasons = sorted((r.source_file.rsplit("/", 1)[-1], r.reason) for r in quarantine)
    assert [name for name, _ in reasons] == ["r1.xml", "r1.xml", "r2.xml", "r3.xml"]
    assert "first field without a value: value" in reasons[0][1] + reasons[1][1]
    assert "field n: missing or null (declared NOT NULL)" in reasons[0][1] + reasons[1][1]
    assert all(r.raw for r in quarantine)  # what Spark's reader kept of each, never nothing

    later = [xml_record("z", "9.5", "9")]
    (landing / "r4.xml").write_text("<readings>" + "".join(later) + "</readings>")
    assert runner.main(["readings"]) == 0  # only the new file: each record once
    assert {(r.sensor, r.value, r.n) for r in read(spark, "bronze.readings").collect()} == expected | {("z", 9.5, 9)}


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
