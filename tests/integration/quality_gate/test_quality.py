"""The data-quality gate through `millpond run`, on real Spark + Delta + GX, checked like a user would.

References are computed independently (tests/support/reference.py over the landed files): bad rows are landed in their
own files, so "the tables without them" is the reference over the good files only.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files, land_file
from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.delta_log import table_state
from millpond.runs import reports, run_summary
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference, device_counts, hourly, read, silver_keys
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")
SUITE = "activity.silver.activity"
IN_SET = "expect_column_values_to_be_in_set(gt)"
X_RANGE = "expect_column_values_to_be_between(x)"
INDEX_WARN = "expect_column_values_to_be_between(Index)"


def landing(lake: Path) -> Path:
    return lake / "landing" / "activity"


def land_good(lake: Path, files: int = 1, rows: int = 300, seed: int = 0) -> None:
    activity_files(landing(lake), files, rows, duplicates=0.05, seed=seed)


def land_records(lake: Path, name: str, records: list[dict]) -> None:
    land_file(landing(lake), name, [json.dumps(r) for r in records])


def record(device: str, index: int, **overrides) -> dict:
    row = {
        "Recorded_At": f"2026-11-01T00:{index % 60:02d}:00.000Z",
        "Device": device,
        "Index": index,
        "Model": "nexus4",
        "User": "a",
        "gt": "walk",
        "x": 0.5,
        "y": -0.5,
        "z": 9.8,
    }
    return row | overrides


def assert_gated(spark, lake: Path, tmp_path: Path, *bad_files: str) -> None:
    """Bronze holds every landed row; silver and gold exactly the rows of the good files, once."""
    everything, good = activity_reference(landing(lake)), reference_without(lake, tmp_path, *bad_files)
    assert read(spark, "bronze.activity").count() == len(everything.bronze)
    keys = silver_keys(spark)
    assert keys == sorted(good.silver)  # sorted lists: a duplicate would show
    assert device_counts(spark) == good.device_counts
    actual = hourly(spark)
    assert set(actual) == set(good.hourly)
    for key, expected in good.hourly.items():
        assert actual[key]["recordings"] == expected["recordings"], key
        assert all(abs(actual[key][c] - expected[c]) < 1e-9 for c in ("avg_x", "avg_y", "avg_z")), key


def reference_without(lake: Path, tmp_path: Path, *bad_files: str):
    """The reference over the landed files minus the bad ones (plain Python, no Spark)."""
    good = tmp_path / "good-landing"
    shutil.rmtree(good, ignore_errors=True)
    good.mkdir()
    for path in landing(lake).glob("*.json"):
        if path.name not in bad_files:
            shutil.copy(path, good / path.name)
    return activity_reference(good)


def versions() -> dict[str, int]:
    return {t: table_state(paths.table_path(t)).version for t in TABLES}


def snapshot(spark) -> dict:
    return {
        "versions": versions(),
        "silver": silver_keys(spark),
        "counts": device_counts(spark),
        "hourly": hourly(spark),
    }


def test_clean_increment_passes_warn_only_reports_and_results_join_the_event_log(spark, lake, capsys):
    land_good(lake, seed=1)
    land_records(lake, "negative-index.json", [record("gear_9", -7)])  # warn rule: reported, kept
    assert runner.main(["activity", "--run-id", "clean"]) == 0
    out = capsys.readouterr().out
    assert_matches_reference(spark, activity_reference(landing(lake)))  # gold refreshed with every row
    assert ("gear_9", -7, "2026-11-01T00:53:00.000Z") in silver_keys(spark)
    assert f"report {reports.docs_dir()}" in out and str(reports.index_path()) in out
    summary = {t["table"]: t for t in run_summary.load("activity", "clean")["tables"]}
    gate = summary["silver.activity"]["gate"]
    assert summary["silver.activity"]["outcome"] == "succeeded"
    assert gate["outcome"] == "warned" and gate["failed_expectations"] == []
    assert [(w["expectation"], w["severity"], w["unexpected_count"]) for w in gate["warnings"]] == [
        (INDEX_WARN, "warn", 1)
    ]
    assert Path(gate["report_path"]).exists()
    assert not paths.quarantine_path("silver.activity").exists()
    # validation results land in Delta, joinable with the event log on run_id
    results = spark.read.format("delta").load(str(reports.validation_results_path()))
    events = spark.read.format("delta").load(str(paths.event_log_path()))
    joined = results.join(events.select("run_id", "table", "outcome"), ["run_id", "table"])
    rows = {r.expectation: r for r in joined.where("run_id = 'clean'").collect()}
    assert set(rows) == {
        "expect_column_values_to_not_be_null(Device)",
        "expect_column_values_to_not_be_null(Recorded_At)",
        IN_SET,
        X_RANGE,
        "expect_column_values_to_be_between(y)",
        "expect_column_values_to_be_between(z)",
        INDEX_WARN,
        "expect_compound_columns_to_be_unique(Device,Index,Recorded_At)",
    }
    assert (rows[INDEX_WARN].success, rows[INDEX_WARN].unexpected_count, rows[INDEX_WARN].severity) == (
        False,
        1,
        "warn",
    )
    assert rows[IN_SET].success and rows[IN_SET].outcome == "succeeded"
    assert rows[IN_SET].element_count == len(activity_reference(landing(lake)).silver)


def test_a_batch_that_passes_is_reported_with_its_counts_and_one_that_warns_with_its_failing_values(spark, lake):
    """A clean batch's report comes from counts alone; a batch where anything fails shows its failing values."""
    land_good(lake, seed=2)
    assert runner.main(["activity", "--run-id", "passes"]) == 0
    results = spark.read.format("delta").load(str(reports.validation_results_path())).where("run_id = 'passes'")
    silver_rows = len(activity_reference(landing(lake)).silver)
    assert {(r.success, r.unexpected_count, r.element_count) for r in results.collect()} == {(True, 0, silver_rows)}
    passed_page = page_text(results.first().report_path)
    assert passed_page.count("0% unexpected") == 6 and passed_page.count("100% not null") == 2

    land_records(
        lake,
        "negative-index.json",
        [record("gear_9", -7), record("gear_9", -8, Recorded_At="2026-11-01T00:59:00.000Z")],
    )
    assert runner.main(["activity", "--run-id", "warns"]) == 0
    summary = {t["table"]: t for t in run_summary.load("activity", "warns")["tables"]}
    gate = summary["silver.activity"]["gate"]
    assert gate["outcome"] == "warned" and [(w["expectation"], w["unexpected_count"]) for w in gate["warnings"]] == [
        (INDEX_WARN, 2)
    ]
    warned_page = page_text(gate["report_path"])
    assert "2 unexpected values found" in warned_page and "Unexpected Value Count" in warned_page
    assert "-7 1" in warned_page and "-8 1" in warned_page  # each failing value with its count


def page_text(report_path: str) -> str:
    """A Data Docs page as its reader sees it: the text without tags, whitespace runs as one space."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", Path(report_path).read_text()))


def test_failing_increment_keeps_gold_unchanged_until_the_rule_is_fixed(spark, lake, tmp_path, monkeypatch, backend):
    """On both backends: on the engine the gate validates in the server's batch worker and its verdict, counts and
    report reach the run from there."""
    land_good(lake, seed=2)
    backend.succeed("--run-id", "before")
    before = snapshot(spark)
    land_good(lake, seed=3)
    land_records(lake, "flying.json", [record("s3_7", 7000 + i, gt="fly") for i in range(3)])
    code, out, err = backend.run("--run-id", "fly-1")
    assert code == 4, (out + err)[-3000:]
    backend.assert_ran_here(out)
    assert "data-quality gate FAILED for silver.activity (suite activity.silver.activity)" in err
    assert f"expectation {IN_SET} [fail]: 3 unexpected rows" in err
    report = run_summary.load("activity", "fly-1")
    gate = {t["table"]: t for t in report["tables"]}["silver.activity"]["gate"]
    assert f"report: {gate['report_path']}" in err and Path(gate["report_path"]).exists()
    assert "--quarantine-failures silver.activity" in err
    after = snapshot(spark)
    assert after["versions"]["bronze.activity"] == before["versions"]["bronze.activity"] + 1  # bronze ingested
    assert {k: v for k, v in after.items() if k != "versions"} == {k: v for k, v in before.items() if k != "versions"}
    assert {t: after["versions"][t] for t in TABLES[1:]} == {t: before["versions"][t] for t in TABLES[1:]}
    outcomes = {t["table"]: t["outcome"] for t in report["tables"]}
    assert outcomes == {
        "bronze.activity": "succeeded",
        "silver.activity": "gate_failed",
        "gold.device_counts": "skipped",
        "gold.activity_hourly": "skipped",
    }
    # `millpond check` sees the same pending slice (what silver has not committed), fails the same way, writes nothing
    bronze = after["versions"]["bronze.activity"]
    code, out, err = backend.command("check", "activity", "--table", "silver.activity")
    assert code == 4, (out + err)[-3000:]
    assert f"checking bronze.activity versions {bronze}..{bronze}" in out
    assert (
        f"expectation {IN_SET} failed: 3 unexpected of {len(activity_reference(landing(lake)).silver) - len(before['silver'])} rows"
        in err
    )
    code, out, err = backend.command("check", "activity", "--version-from", "0", "--version-to", str(bronze - 1))
    assert code == 0, (out + err)[-3000:]  # the clean slice
    assert [e["outcome"] for e in reports.history() if e["mode"] == "check"] == ["failed", "passed"]
    assert snapshot(spark) == after and not paths.quarantine_path("silver.activity").exists()
    # a later run replays the same batch and fails again: nothing is published by accident;
    # deferred (the Airflow ingest task), it exits 0 and leaves the failure in the run summary
    backend.succeed("--run-id", "fly-2", "--defer-gate-failure")
    assert snapshot(spark) == after
    assert {t["table"]: t["outcome"] for t in run_summary.load("activity", "fly-2")["tables"]}[
        "silver.activity"
    ] == "gate_failed"
    # way out (a): fix the rule (here "fly" becomes a valid activity) and rerun: the replayed batch passes
    suites = tmp_path / "expectations"
    suites.mkdir()
    suite = json.loads((REPO / "expectations" / f"{SUITE}.json").read_text())
    for expectation in suite["expectations"]:
        if expectation["type"] == "expect_column_values_to_be_in_set":
            expectation["kwargs"]["value_set"].append("fly")
    (suites / f"{SUITE}.json").write_text(json.dumps(suite))
    monkeypatch.setenv("MILLPOND_EXPECTATIONS", str(suites))
    backend.succeed("--run-id", "fixed")
    assert_matches_reference(spark, activity_reference(landing(lake)))  # nothing lost, nothing duplicated
    assert device_counts(spark)["s3_7"] == 3


def test_drop_rule_quarantines_rows_and_gold_refreshes_without_them(spark, lake, tmp_path):
    land_good(lake, seed=4)
    land_records(lake, "spiky.json", [record("gear_8", 8000 + i, x=99.0) for i in range(4)])
    assert runner.main(["activity", "--run-id", "spiky"]) == 0
    assert_gated(spark, lake, tmp_path, "spiky.json")
    quarantine = spark.read.format("delta").load(str(paths.quarantine_path("silver.activity"))).collect()
    assert sorted(json.loads(r.raw)["Index"] for r in quarantine) == [8000, 8001, 8002, 8003]
    assert {(r.rule, r.run_id) for r in quarantine} == {(X_RANGE, "spiky")}
    assert all(r.source_file.endswith("spiky.json") and X_RANGE in r.reason for r in quarantine)
    gate = {t["table"]: t for t in run_summary.load("activity", "spiky")["tables"]}["silver.activity"]
    assert gate["rows_quarantined"] == 4 and gate["gate"]["rows_set_aside"] == 4


def test_way_out_by_quarantining_the_failing_slice(spark, lake, tmp_path, capsys):
    land_good(lake, seed=5)
    land_records(
        lake,
        "bad.json",
        [record("s3_8", 9000 + i, gt="fly") for i in range(3)]
        + [record("s3_8", 9100, gt="fly", x=99.0), record("s3_8", 9101, x=-99.0)],
    )
    assert runner.main(["activity", "--run-id", "blocked"]) == 4
    assert not paths.table_path("silver.activity").exists() or read(spark, "silver.activity").count() == 0
    capsys.readouterr()
    assert runner.main(["activity", "--run-id", "set-aside", "--quarantine-failures", "silver.activity"]) == 0
    assert "quarantines rows failing `fail` expectations of silver.activity" in capsys.readouterr().out
    assert_gated(spark, lake, tmp_path, "bad.json")  # every good row there, once
    quarantine = {
        json.loads(r.raw)["Index"]: r
        for r in spark.read.format("delta").load(str(paths.quarantine_path("silver.activity"))).collect()
    }
    assert sorted(quarantine) == [9000, 9001, 9002, 9100, 9101]
    assert quarantine[9000].rule == IN_SET and quarantine[9101].rule == X_RANGE
    assert set(quarantine[9100].rule.split("; ")) == {IN_SET, X_RANGE}
    assert {r.run_id for r in quarantine.values()} == {"set-aside"}
    before = snapshot(spark)
    assert runner.main(["activity", "--run-id", "after"]) == 0  # the pipeline resumes: a rerun duplicates nothing
    assert snapshot(spark) == before
    assert runner.main(["activity", "--quarantine-failures", "gold.device_counts"]) == 2  # not gated: refused
