"""`millpond preview` on real Spark: each micro-batch printed, at most --batches of them, and the lake untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from millpond.driver import preview, runner

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")
SPEC = {
    "pipeline": "peek",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 2,
    "sources": {
        "events": {"format": "json", "path": "landing/events", "schema": "ts TIMESTAMP, device STRING, value BIGINT"}
    },
    "tables": {
        "bronze.events": {"from": "landing.events"},
        "silver.events": {
            "from": "bronze.events",
            "transform": {"sql": "SELECT ts, device, value FROM source WHERE value > 1"},
        },
        "gold.device_totals": {
            "from": "silver.events",
            "output_mode": "complete",
            "order_by": ["device"],
            "aggregate": {"group_by": ["device"], "measures": {"readings": "count(*)", "total": "sum(value)"}},
        },
        "gold.latest": {
            "from": "silver.events",
            "output_mode": "update",
            "watermark": {"column": "ts", "delay": "10 minutes"},
            "aggregate": {
                "window": {"column": "ts", "duration": "10 minutes", "as": "window_start"},
                "group_by": ["device"],
                "measures": {"readings": "count(*)"},
            },
            "keys": ["window_start", "device"],
        },
    },
}
# Per landed file: (minute, device, value) lines, then one malformed line (value is not a number).
FILES = [
    [(1, "d1", 1), (2, "d2", 5), (3, "d1", 7), (4, "d2", 2)],
    [(11, "d1", 3), (12, "d1", 4), (13, "d2", 9)],
    [(21, "d2", 6), (22, "d1", 8)],
]


def land(lake: Path, number: int) -> None:
    folder = lake / "landing" / "events"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"ts": f"2026-11-01T00:{m:02d}:00Z", "device": d, "value": v}) for m, d, v in FILES[number]]
    lines.append('{"ts": "2026-11-01T00:00:00Z", "device": "d1", "value": "lots"}')
    (folder / f"events-{number}.json").write_text("\n".join(lines) + "\n")
    os.utime(folder / f"events-{number}.json", (1_800_000_000 + number, 1_800_000_000 + number))  # file order


def lake_listing(lake: Path) -> dict[str, tuple[int, int] | None]:
    """Every path under the lake (checkpoints and event log included), files with size and mtime."""
    return {
        str(p.relative_to(lake)): ((p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None)
        for p in lake.rglob("*")
    }


def tables(out: str) -> list[list[list[str]]]:
    """The grids printed, each as rows of cells (header row first)."""
    grids, current = [], None
    for line in out.splitlines():
        if line.startswith("+-"):
            if current is None:
                current = []
            continue
        if line.startswith("| ") and current is not None:
            current.append([cell.strip() for cell in line.strip("|").split("|")])
            continue
        if current:
            grids.append(current)
        current = None
    if current:
        grids.append(current)
    return grids


@pytest.fixture
def specs(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "peek.yaml").write_text(yaml.safe_dump(SPEC))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))
    return folder


@pytest.fixture
def peek_lake(lake, specs):
    """Landed files, bronze and silver run once, so every table has input to preview."""
    for number in range(len(FILES)):  # one bronze and one silver commit per file
        land(lake, number)
        assert runner.main(["peek", "--tables", "bronze.events,silver.events", "--run-id", f"setup-{number}"]) == 0
    return lake


@pytest.mark.own_jvm
def test_preview_prints_each_micro_batch_and_stops_after_batches(spark, peek_lake, capsys):
    before = lake_listing(peek_lake)
    capsys.readouterr()
    assert preview.main(["peek", "bronze.events", "--batches", "2", "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "reads landing.events one file per micro-batch, at most 2 micro-batches" in out
    assert "batch 0: 5 rows, first 2, 1 with an _error (they would go to the quarantine)" in out
    assert "batch 1: 4 rows, first 2, 1 with an _error" in out
    assert "batch 2:" not in out and "stopped after 2 micro-batches (--batches 2)" in out
    grids = tables(out)
    assert len(grids) == 2 and all(len(grid) == 3 for grid in grids)  # header + 2 rows each
    assert grids[0][0] == ["ts", "device", "value", "_source_file", "_error", "_rescued_data"]
    assert lake_listing(peek_lake) == before  # no table, checkpoint, quarantine or event log row written


@pytest.mark.own_jvm
def test_preview_of_complete_and_update_aggregates_prints_the_result_tables(spark, peek_lake, capsys):
    before = lake_listing(peek_lake)
    capsys.readouterr()
    assert preview.main(["peek", "gold.device_totals", "--batches", "10"]) == 0
    out = capsys.readouterr().out
    assert "(complete mode)" in out and "all available input shown in" in out
    final = tables(out)[-1]  # complete mode: the last batch is the whole aggregate over silver
    good = [(d, v) for rows in FILES for _, d, v in rows if v > 1]
    expected = [
        [d, str(sum(1 for g, _ in good if g == d)), str(sum(v for g, v in good if g == d))] for d in ("d1", "d2")
    ]
    assert final == [["device", "readings", "total"], *expected]

    capsys.readouterr()
    assert preview.main(["peek", "gold.latest", "--batches", "10", "--rows", "20"]) == 0
    out = capsys.readouterr().out
    assert "(update mode)" in out
    latest: dict[tuple[str, str], str] = {}
    for grid in tables(out):  # update mode: each batch holds the changed windows; the newest value wins
        for window_start, device, readings in grid[1:]:
            latest[(window_start, device)] = readings
    counts: dict[tuple[str, str], int] = {}
    for m, d in ((m, d) for rows in FILES for m, d, v in rows if v > 1):  # silver's rows
        key = (f"2026-11-01 00:{m // 10 * 10:02d}:00", d)
        counts[key] = counts.get(key, 0) + 1
    assert latest == {k: str(n) for k, n in counts.items()}
    assert lake_listing(peek_lake) == before


def test_preview_without_input_exits_1_with_the_fix_before_any_jvm(lake, specs, capsys):
    assert preview.main(["peek", "gold.latest"]) == 1
    assert "gold.latest reads silver.events, which has no data yet. Fix: millpond run peek --tables silver.events" in (
        capsys.readouterr().err
    )
    assert preview.main(["peek", "bronze.events"]) == 1
    err = capsys.readouterr().err
    assert "bronze.events reads landing.events, whose folder" in err and "does not exist yet. Fix: land files" in err
    assert list(lake.iterdir()) == []


def test_preview_of_an_unknown_table_exits_2_listing_the_tables(peek_lake, capsys):
    assert preview.main(["peek", "gold.nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown table 'gold.nope'; tables: bronze.events, silver.events, gold.device_totals, gold.latest" in err


def test_millpond_preview_command_prints_batches_and_leaves_the_lake_as_it_was(peek_lake):
    before = lake_listing(peek_lake)
    env = {**os.environ, "MILLPOND_LAKE": str(peek_lake)}
    done = subprocess.run(
        [MILLPOND, "preview", "peek", "silver/events", "--batches", "1", "--rows", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch 0: 3 rows" in done.stdout and "stopped after 1 micro-batch (--batches 1)" in done.stdout
    assert tables(done.stdout)[0][0] == ["ts", "device", "value"]
    assert lake_listing(peek_lake) == before
    bad = subprocess.run(
        [MILLPOND, "preview", "peek", "silver.nope"], env=env, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "tables: bronze.events, silver.events" in bad.stderr
