"""The file-sink pipeline the file-sink tests share (tests/integration/pipelines/test_file_sinks.py on a folder lake,
tests/integration/object_store/test_file_sinks_s3a.py on the store): landing json -> bronze (Delta, with
quarantine) -> a parquet copy, a filtered json table and an append-mode windowed count in csv, its rounds of landed
lines and a plain-Python reference computed from the landed files alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DELAY, WINDOW = 5, 10  # minutes: the csv table's watermark delay and tumbling window

SPEC = {
    "pipeline": "exports",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 2,
    "sources": {
        "events": {"format": "json", "path": "landing/events", "schema": "ts TIMESTAMP, device STRING, value BIGINT"}
    },
    "tables": {
        "bronze.events": {"from": "landing.events"},
        "gold.events_parquet": {
            "from": "bronze.events",
            "sink": {"format": "parquet"},
            "transform": {"sql": "SELECT ts, device, value FROM source"},
        },
        "gold.big_json": {
            "from": "bronze.events",
            "sink": {"format": "json"},
            "transform": {"sql": "SELECT device, value FROM source WHERE value > 5"},
        },
        "gold.counts_csv": {
            "from": "bronze.events",
            "sink": {"format": "csv", "options": {"header": "true"}},
            "watermark": {"column": "ts", "delay": f"{DELAY} minutes"},
            "aggregate": {
                "window": {"column": "ts", "duration": f"{WINDOW} minutes", "as": "window_start"},
                "group_by": ["device"],
                "measures": {"readings": "count(*)"},
            },
        },
    },
}
SINKS = ("gold.events_parquet", "gold.big_json", "gold.counts_csv")

# (minute after T0, device, value) per round, in event-time order (no late rows); plus one malformed line each.
ROUNDS = [
    [(1, "d1", 1), (4, "d1", 7), (9, "d2", 3), (12, "d1", 8), (15, "d2", 9), (21, "d2", 2), (24, "d1", 6)],
    [(26, "d1", 10), (29, "d2", 4), (33, "d1", 11), (38, "d2", 12), (44, "d1", 1)],
    [(47, "d2", 13), (52, "d1", 5), (58, "d2", 14), (63, "d1", 15)],
]


def land(lake: Path, round_number: int) -> None:
    folder = lake / "landing" / "events"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"ts": (T0 + timedelta(minutes=m)).strftime("%Y-%m-%dT%H:%M:%S.000Z"), "device": d, "value": v})
        for m, d, v in ROUNDS[round_number]
    ]
    lines.insert(2, '{"ts": "2026-11-01T00:00:00.000Z", "device": "d9", "value": "seven"}')  # to the quarantine
    tmp = folder / f".events-{round_number}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(folder / f"events-{round_number}.json")


def reference(lake: Path) -> dict[str, list[tuple]]:
    """Each sink's rows, sorted, computed from the landed files alone (a bad line is one whose value is no int)."""
    rows = []
    for file in sorted((lake / "landing" / "events").glob("*.json")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            if isinstance(record["value"], int):
                minute = int((datetime.fromisoformat(record["ts"].replace("Z", "+00:00")) - T0).total_seconds()) // 60
                rows.append((minute, record["device"], record["value"]))
    watermark = max(minute for minute, _, _ in rows) - DELAY  # each run ends with a batch that advances it
    counts: dict[tuple, int] = {}
    for minute, device, _ in rows:
        start = minute // WINDOW * WINDOW
        counts[(start, device)] = counts.get((start, device), 0) + 1
    return {
        "gold.events_parquet": sorted(rows),
        "gold.big_json": sorted((d, v) for _, d, v in rows if v > 5),
        "gold.counts_csv": sorted((s, d, n) for (s, d), n in counts.items() if s + WINDOW <= watermark),
    }
