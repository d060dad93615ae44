"""A reprocess that has replaced some slices but not yet every table it owes: the next run finishes it first.

A reprocess commits one table at a time (millpond.engine.reprocess); the live streams skip its commits, so a table
it has not reached yet would keep the interval's old rows for good if nothing remembered it. Before its first
commit the run records the interval and every table it owes (its slices, the tables downstream of them, its
complete-mode rebuilds) in `_system/reprocess/<pipeline>.json`, and strikes each one off as it lands. A run of the
pipeline, reprocess or not, that finds an entry covering its tables reprocesses those first (runner.main): a
crash, a gate stop or an Airflow task that never ran leaves the tables converging, not silently stale.
"""

from __future__ import annotations

import json

from millpond.lake import paths


def marker_path(pipeline: str) -> paths.LakePath:
    return paths.system_path("reprocess") / f"{pipeline}.json"


def pending(pipeline: str) -> list[dict]:
    """[{"interval": "START/END", "tables": [...]}, ...], oldest first."""
    try:
        return list(json.loads(marker_path(pipeline).read_text()).get("pending", []))
    except FileNotFoundError:
        return []


def begin(pipeline: str, interval: str, tables: list[str]) -> None:
    entries = pending(pipeline)
    entry = next((e for e in entries if e["interval"] == interval), None)
    if entry is None:
        entries.append({"interval": interval, "tables": list(tables)})
    else:
        entry["tables"] = entry["tables"] + [t for t in tables if t not in entry["tables"]]
    _write(pipeline, entries)


def done(pipeline: str, interval: str | None, table_id: str) -> None:
    """Strike the table off the interval's entry; `interval=None`: off every entry (a table rebuilt whole)."""
    entries = pending(pipeline)
    for entry in entries:
        if interval in (None, entry["interval"]) and table_id in entry["tables"]:
            entry["tables"].remove(table_id)
    _write(pipeline, [e for e in entries if e["tables"]])


def owed(pipeline: str) -> set[str]:
    """Every table some unfinished reprocess still owes."""
    return {table for entry in pending(pipeline) for table in entry["tables"]}


def _write(pipeline: str, entries: list[dict]) -> None:
    path = marker_path(pipeline)
    if not entries:
        path.unlink(missing_ok=True)
        return
    paths.write_atomically(path, json.dumps({"pending": entries}, indent=2) + "\n")
