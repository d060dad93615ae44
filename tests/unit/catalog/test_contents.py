"""What the catalog names, from the specs and the lake alone: only tables that exist, at their lake paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond.catalog import contents
from millpond.spec import load_pipeline

pytestmark = pytest.mark.unit


def delta_table(path: Path) -> None:
    (path / "_delta_log").mkdir(parents=True)


def test_names_only_what_the_lake_holds_with_the_specs_descriptions(tmp_path):
    activity = load_pipeline("activity")
    for folder in ("bronze/activity", "bronze/activity_quarantine", "silver/activity", "_system/validation_results"):
        delta_table(tmp_path / folder)
    (tmp_path / "gold" / "device_counts").mkdir(parents=True)  # a folder without a Delta log is not a table yet
    entries = {e.qualified: e for e in contents.tables([activity], tmp_path)}
    assert sorted(entries) == [
        "bronze.activity",
        "bronze.activity_quarantine",
        "millpond_system.gate_results",
        "silver.activity",
    ]
    assert entries["silver.activity"].location == str(tmp_path / "silver" / "activity")
    assert entries["silver.activity"].comment == activity.tables["silver.activity"].description
    assert entries["millpond_system.gate_results"].location == str(tmp_path / "_system" / "validation_results")
    assert contents.views(list(entries.values())) == []  # `runs` reads the event log, which is not there yet


def test_the_runs_view_comes_with_the_event_log_and_names_it_by_catalog_name(tmp_path):
    delta_table(tmp_path / "_system" / "event_log")
    (view,) = contents.views(contents.tables([], tmp_path))
    assert view.qualified == "millpond_system.runs"
    assert "FROM millpond_system.event_log" in view.query and str(tmp_path) not in view.query
