"""A spec's column descriptions (`columns:`) become the comments of the Delta tables' columns, read back with delta-rs.

Cost: five in-process runs of a three-table pipeline over a few lines (the suite's shared session; about 30 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from millpond.driver import runner
from millpond.spec import load_pipeline
from tests.support.lineage import events_in, file_transport, table_events

pytestmark = pytest.mark.integration

SPEC = {
    "pipeline": "described",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 1,
    "sources": {"readings": {"format": "json", "path": "landing/readings", "schema": "device STRING, value BIGINT"}},
    "tables": {
        "bronze.readings": {
            "from": "landing.readings",
            "columns": {"device": "The device that sent the reading.", "_source_file": "The landing file."},
        },
        "silver.readings": {
            "from": "bronze.readings",
            "transform": {"sql": "SELECT device, value FROM source WHERE device IS NOT NULL"},
            # quotes and a backslash reach the table as written
            "columns": {"DEVICE": "The device's name, as sent: 'dev-1' or dev\\2.", "value": "The reading."},
        },
        "gold.per_device": {
            "from": "silver.readings",
            "output_mode": "complete",
            "aggregate": {"group_by": ["device"], "measures": {"readings": "count(*)", "total": "sum(value)"}},
            "columns": {"readings": "Readings of the device."},
        },
    },
}


def comments(lake: Path, table: str) -> dict[str, str | None]:
    fields = json.loads(DeltaTable(str(lake / table)).schema().to_json())["fields"]
    return {f["name"]: (f.get("metadata") or {}).get("comment") for f in fields}


def metadata_only_commits(lake: Path, table: str) -> int:
    """Commits with a new schema or properties and no data: what a comment change commits."""
    count = 0
    for commit in sorted((lake / table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        if any("metaData" in a for a in actions) and not any("add" in a or "remove" in a for a in actions):
            count += 1
    return count


def per_device(lake: Path) -> dict[str, tuple[int, int]]:
    rows = DeltaTable(str(lake / "gold" / "per_device")).to_pyarrow_table().to_pylist()
    return {r["device"]: (r["readings"], r["total"]) for r in rows}


def test_described_columns_become_the_tables_comments_once_and_follow_the_spec(
    lake, spark, tmp_path, monkeypatch, capsys
):
    specs = tmp_path / "pipelines"
    specs.mkdir()
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    spec_file = specs / "described.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC))
    sent = tmp_path / "lineage.jsonl"
    for name, value in file_transport(sent).items():
        monkeypatch.setenv(name, value)
    landed: list[tuple[str, int]] = []

    def land_and_run(number: int) -> int:
        lines = [(f"dev-{i % 3}", number * 10 + i) for i in range(5)]
        landed.extend(lines)
        folder = lake / "landing" / "readings"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"part-{number}.json").write_text(
            "".join(json.dumps({"device": d, "value": v}) + "\n" for d, v in lines)
        )
        return runner.main(["described", "--run-id", f"run-{number}"])

    def reference() -> dict[str, tuple[int, int]]:
        devices = sorted({d for d, _ in landed})
        return {d: (sum(1 for x, _ in landed if x == d), sum(v for x, v in landed if x == d)) for d in devices}

    assert land_and_run(1) == 0
    assert comments(lake, "bronze/readings")["device"] == "The device that sent the reading."
    assert comments(lake, "bronze/readings")["_source_file"] == "The landing file."
    # the spec's DEVICE is the table's `device`: names are case-insensitive, the table's spelling is kept
    assert comments(lake, "silver/readings") == {
        "device": "The device's name, as sent: 'dev-1' or dev\\2.",
        "value": "The reading.",
    }
    # gold's `device` is silver's, passed through: Spark carries a column's comment with it, the spec adds its own
    silver_device = comments(lake, "silver/readings")["device"]
    assert comments(lake, "gold/per_device") == {
        "device": silver_device,
        "readings": "Readings of the device.",
        "total": None,
    }
    assert per_device(lake) == reference()
    # the run's OpenLineage event gives each output column its comment
    gold_event = table_events(events_in(sent), load_pipeline("described"))["gold.per_device"]
    fields = gold_event["outputs"][0]["facets"]["schema"]["fields"]
    assert {f["name"]: f.get("description") for f in fields} == comments(lake, "gold/per_device")
    described = {t: metadata_only_commits(lake, t) for t in ("bronze/readings", "silver/readings", "gold/per_device")}
    assert described == {"bronze/readings": 1, "silver/readings": 1, "gold/per_device": 1}

    assert land_and_run(2) == 0  # an unchanged spec commits no comment again
    assert {t: metadata_only_commits(lake, t) for t in described} == described
    assert per_device(lake) == reference()

    # A description changed in the spec reaches the table with the next run, in one commit; gold's stream of
    # silver passes over that commit, with rows after it (a third run).
    SPEC_CHANGED = json.loads(json.dumps(SPEC))
    SPEC_CHANGED["tables"]["silver.readings"]["columns"]["value"] = "The reading, in units of the device."
    spec_file.write_text(yaml.safe_dump(SPEC_CHANGED))
    assert land_and_run(3) == 0
    assert comments(lake, "silver/readings")["value"] == "The reading, in units of the device."
    assert metadata_only_commits(lake, "silver/readings") == 2
    assert land_and_run(4) == 0
    assert per_device(lake) == reference()
    assert metadata_only_commits(lake, "silver/readings") == 2

    # A column the table does not have: the run refuses gold before writing it, naming the spec's field and fix.
    SPEC_CHANGED["tables"]["gold.per_device"]["columns"] = {"reading": "A typo."}
    spec_file.write_text(yaml.safe_dump(SPEC_CHANGED))
    gold_log = sorted(p.name for p in (lake / "gold" / "per_device" / "_delta_log").glob("*.json"))
    capsys.readouterr()
    assert land_and_run(5) != 0
    said = capsys.readouterr()
    message = said.out + said.err
    assert (
        f"{spec_file}: tables.gold.per_device.columns names 'reading', which gold.per_device does not have" in message
    )
    assert "(its columns: device, readings, total); nothing was written. Fix:" in message
    assert sorted(p.name for p in (lake / "gold" / "per_device" / "_delta_log").glob("*.json")) == gold_log
