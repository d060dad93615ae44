"""A spec's column descriptions (`columns:`) become the comments of the Delta tables' columns, read back with delta-rs.

Cost: per backend, nine runs of a three-table pipeline over a few lines (own JVM: in-process on the worker's
session, about 20 s; the engine: a client process each, about 55 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from millpond.spec import load_pipeline
from tests.support.lineage import events_in, file_transport, table_events

pytestmark = pytest.mark.integration

SPEC = {
    "pipeline": "described",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 1,
    "sources": {
        "readings": {
            "format": "json",
            "path": "landing/readings",
            "schema": "device STRING, value BIGINT",
            "schema_drift": "add",  # bronze's columns are then known only once data arrives: checked after writing
        }
    },
    "tables": {
        "bronze.readings": {
            "from": "landing.readings",
            "columns": {"device": "The device that sent the reading.", "_source_file": "The landing file."},
        },
        "silver.readings": {
            "from": "bronze.readings",
            "transform": {"sql": "SELECT device, value FROM source WHERE device IS NOT NULL"},
            # quotes, a backslash and `${...}` (Spark's variable syntax) reach the table as written
            "columns": {"DEVICE": "The device's name, as sent: 'dev-1' or dev\\2.", "value": "In ${units}."},
        },
        "gold.per_device": {
            "from": "silver.readings",
            "output_mode": "complete",
            "aggregate": {"group_by": ["device"], "measures": {"readings": "count(*)", "total": "sum(value)"}},
            "columns": {"readings": "Readings of the device."},
        },
    },
}
TABLES = ("bronze/readings", "silver/readings", "gold/per_device")


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


def test_described_columns_become_the_tables_comments_once_and_follow_the_spec(lake, backend, tmp_path, monkeypatch):
    specs = tmp_path / "pipelines"
    specs.mkdir()
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    spec_file = specs / "described.yaml"
    spec = json.loads(json.dumps(SPEC))
    spec_file.write_text(yaml.safe_dump(spec))
    sent = tmp_path / "lineage.jsonl"
    for name, value in file_transport(sent).items():
        monkeypatch.setenv(name, value)
    landed: list[tuple[str, int]] = []

    def run(number: int, land: bool = True) -> tuple[int, str]:
        if land:
            lines = [(f"dev-{i % 3}", number * 10 + i) for i in range(5)]
            landed.extend(lines)
            folder = lake / "landing" / "readings"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"part-{number}.json").write_text(
                "".join(json.dumps({"device": d, "value": v}) + "\n" for d, v in lines)
            )
        code, out, err = backend.run("--run-id", f"run-{number}", pipeline="described")
        return code, out + err

    def reference() -> dict[str, tuple[int, int]]:
        devices = sorted({d for d, _ in landed})
        return {d: (sum(1 for x, _ in landed if x == d), sum(v for x, v in landed if x == d)) for d in devices}

    code, said = run(1)
    assert code == 0, said[-4000:]
    assert "gold.per_device: described readings (the spec's `columns:`, one commit)" in said
    assert comments(lake, "bronze/readings")["device"] == "The device that sent the reading."
    assert comments(lake, "bronze/readings")["_source_file"] == "The landing file."
    # the spec's DEVICE is the table's `device`: names are case-insensitive, the table's spelling is kept
    silver_device = "The device's name, as sent: 'dev-1' or dev\\2."
    assert comments(lake, "silver/readings") == {"device": silver_device, "value": "In ${units}."}
    # gold's `device` is silver's, passed through: Spark carries a column's comment with it, the spec adds its own
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
    assert {t: metadata_only_commits(lake, t) for t in TABLES} == dict.fromkeys(TABLES, 1)

    code, said = run(2)  # an unchanged spec commits no comment again
    assert code == 0 and "the spec's `columns:`, one commit" not in said, said[-4000:]
    assert {t: metadata_only_commits(lake, t) for t in TABLES} == dict.fromkeys(TABLES, 1)
    assert per_device(lake) == reference()

    # A description changed in the spec reaches the table even when nothing new landed (the same state as a run
    # killed between its data commit and its comment commit), in one commit...
    spec["tables"]["silver.readings"]["columns"]["value"] = "The reading, in units of the device."
    spec_file.write_text(yaml.safe_dump(spec))
    code, said = run(3, land=False)
    assert code == 0 and "silver.readings: described value" in said, said[-4000:]
    assert comments(lake, "silver/readings")["value"] == "The reading, in units of the device."
    assert metadata_only_commits(lake, "silver/readings") == 2
    # ... and gold's stream of silver passes over that commit, with rows after it.
    assert run(4)[0] == 0
    assert per_device(lake) == reference()
    code, said = run(5, land=False)  # then an idle run: nothing to describe, nothing new, no Spark
    assert code == 0 and "no table has anything new: no Spark application started" in said, said[-4000:]
    assert metadata_only_commits(lake, "silver/readings") == 2

    # A column gold does not have, with nothing new: the idle run starts Spark for it and fails gold, naming the
    # spec's field and the fix; nothing is described.
    spec["tables"]["gold.per_device"]["columns"] = {"reading": "A typo."}
    spec_file.write_text(yaml.safe_dump(spec))
    gold_log = sorted(p.name for p in (lake / "gold" / "per_device" / "_delta_log").glob("*.json"))
    code, said = run(6, land=False)
    assert code != 0
    assert (
        f"{spec_file}: tables.gold.per_device.columns names 'reading', which gold.per_device does not have "
        "(its columns: device, readings, total); nothing was described. Fix:"
    ) in said, said[-4000:]
    # With new data, gold is refused before its query writes. A column bronze lacks (its columns only known once
    # written, under `schema_drift: add`): bronze is written and described, with a warning.
    spec["tables"]["bronze.readings"]["columns"]["no_such"] = "Not a column."
    spec_file.write_text(yaml.safe_dump(spec))
    code, said = run(7)
    assert code != 0 and "tables.gold.per_device.columns names 'reading'" in said, said[-4000:]
    assert "nothing was written, rerun. Fix:" in said
    assert "warning: " in said and "tables.bronze.readings.columns names 'no_such', which bronze.readings" in said
    assert sorted(p.name for p in (lake / "gold" / "per_device" / "_delta_log").glob("*.json")) == gold_log
    # The typo mended, gold catches up; then an idle run stays idle, bronze's unknown name notwithstanding.
    spec["tables"]["gold.per_device"]["columns"] = {"readings": "Readings of the device."}
    spec_file.write_text(yaml.safe_dump(spec))
    assert run(8, land=False)[0] == 0
    assert per_device(lake) == reference()
    code, said = run(9, land=False)
    assert code == 0 and "no Spark application started" in said, said[-4000:]
