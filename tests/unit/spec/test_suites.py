"""Suite files: loaded and checked without GX, each problem naming the file, the expectation and the fix."""

from __future__ import annotations

import json

import pytest

from millpond import cli
from millpond.spec.suites import SuiteError, check_suite, load_suite

pytestmark = pytest.mark.unit


def write(folder, name, expectations, **extra):
    (folder / f"{name}.json").write_text(json.dumps({"name": name, "expectations": expectations, **extra}))


def test_activity_suite_has_the_agreed_rules_and_severities():
    suite = load_suite("activity.silver.activity")
    assert {(r.name, r.severity) for r in suite.rules} == {
        ("expect_column_values_to_not_be_null(Device)", "fail"),
        ("expect_column_values_to_not_be_null(Recorded_At)", "fail"),
        ("expect_column_values_to_be_in_set(gt)", "fail"),
        ("expect_column_values_to_be_between(x)", "drop"),
        ("expect_column_values_to_be_between(y)", "drop"),
        ("expect_column_values_to_be_between(z)", "drop"),
        ("expect_column_values_to_be_between(Index)", "warn"),
        ("expect_compound_columns_to_be_unique(Device,Index,Recorded_At)", "fail"),
    }
    in_set = next(r for r in suite.rules if r.type == "expect_column_values_to_be_in_set")
    assert set(in_set.kwargs["value_set"]) == {"stand", "sit", "walk", "bike", "stairsup", "stairsdown"}


def test_every_problem_is_reported_with_a_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("MILLPOND_EXPECTATIONS", str(tmp_path))
    write(
        tmp_path,
        "p.silver.t",
        [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a"}, "meta": {"severity": "block"}},
            {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}, "meta": {"severity": "drop"}},
            {
                "type": "expect_column_values_to_be_between",
                "kwargs": {"column": "x", "max_value": 1, "mostly": 0.9},
                "meta": {"severity": "drop"},
            },
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "b"}},
        ],
    )
    with pytest.raises(SuiteError) as caught:
        load_suite("p.silver.t")
    text = str(caught.value)
    assert "expectations[0] (expect_column_values_to_not_be_null(a)): meta.severity is 'block'" in text
    assert "fail, warn, drop" in text
    assert "expectations[1] (expect_table_row_count_to_be_between()): only row-level expectations can drop" in text
    assert "'mostly' makes no sense for a drop rule" in text
    assert "expectations[3] (expect_column_values_to_not_be_null(b)): meta.severity is None" in text
    assert check_suite("p.silver.nope")[0].endswith(
        "Fix: add p.silver.nope.json or correct the table's 'expectations:' name"
    )


def test_unexpected_row_predicates_follow_gx_null_semantics():
    rules = {r.name: r for r in load_suite("activity.silver.activity").rules}
    assert rules["expect_column_values_to_be_in_set(gt)"].unexpected_sql().startswith("`gt` IS NOT NULL AND NOT (")
    assert (
        rules["expect_column_values_to_be_between(x)"].unexpected_sql()
        == "`x` IS NOT NULL AND NOT (`x` >= -50 AND `x` <= 50)"
    )
    assert rules["expect_column_values_to_not_be_null(Device)"].unexpected_sql() == "`Device` IS NULL"


def test_validate_command_reports_a_broken_suite(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MILLPOND_EXPECTATIONS", str(tmp_path))
    write(
        tmp_path,
        "activity.silver.activity",
        [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "Device"}, "meta": {"severity": "fial"}}],
    )
    assert cli.main(["validate", "activity"]) == 2
    err = capsys.readouterr().err
    assert "activity.silver.activity.json: expectations[0]" in err and "meta.severity is 'fial'" in err
