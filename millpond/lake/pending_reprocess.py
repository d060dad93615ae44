"""A reprocess that has replaced some slices but not yet every table it owes: the next run finishes it first.

A reprocess commits one table at a time (millpond.driver.reprocess); the live streams skip its commits, so a table
it has not reached yet would keep the interval's old rows for good if nothing remembered it. Before its first
commit the run records the interval and every table it owes (its slices, the tables downstream of them, its
complete-mode rebuilds) in `_system/reprocess/<pipeline>.json`, and strikes each one off as it lands. A run of the
pipeline, reprocess or not, that finds an entry covering its tables reprocesses those first (runner.main): a
crash, a gate stop or an Airflow task that never ran leaves the tables converging, not silently stale.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from millpond.lake import paths, storage


def marker_path(pipeline: str) -> paths.LakePath:
    return paths.system_path("reprocess") / f"{pipeline}.json"


def pending(pipeline: str) -> list[dict]:
    """[{"interval": "START/END", "tables": [...]}, ...], oldest first."""
    try:
        return list(json.loads(marker_path(pipeline).read_text()).get("pending", []))
    except FileNotFoundError:
        return []


def begin(
    pipeline: str,
    interval: str,
    tables: list[str],
    committed: Mapping[str, int] | None = None,
    allow_missing_files: bool = False,
    other_intervals: list[str] | None = None,
) -> dict[str, int]:
    """Record that the interval owes `tables`; return the Delta transaction version each table's commit carries.

    A table the interval still owes keeps the version it was given: the run that crashed may have a write of it in
    flight (on the engine the server finishes a write whose client died), and this run's write of the same slice
    under the same version is then skipped by Delta instead of landing twice, whether this run finishes the record or
    was asked for the interval again (an Airflow retry). Any other table gets a version above every one the record
    holds and above `committed` (the table's committed version of this interval's app id, read from its log: a
    clock behind the last writer's cannot make Delta skip a new slice). `allow_missing_files`: the user allowed this
    reprocess to remove the rows of landing files gone since they were read; the run that finishes it may too.
    `other_intervals`: the intervals where the re-read files' rows changed (reprocess.landing_slice): once
    the landing table is replaced, its old rows there are gone, so only this record tells the run that finishes the
    reprocess which intervals the tables downstream must rebuild too."""
    committed = committed or {}
    entries = pending(pipeline)
    entry = next((e for e in entries if e["interval"] == interval), None)
    if entry is None:
        entry = {"interval": interval, "tables": []}
        entries.append(entry)
    versions: dict[str, int] = entry.setdefault("txn_versions", {})
    fresh = max([time.time_ns() // 1000, *(v + 1 for v in versions.values()), *(v + 1 for v in committed.values())])
    for table in tables:
        if table not in entry["tables"] or table not in versions:
            versions[table] = max(fresh, committed.get(table, -1) + 1)
    entry["tables"] = entry["tables"] + [t for t in tables if t not in entry["tables"]]
    entry["allow_missing_files"] = allow_missing_files
    entry["other_intervals"] = sorted(set(entry.get("other_intervals", [])) | set(other_intervals or []))
    _write(pipeline, entries)
    return {table: versions[table] for table in tables}


def done(pipeline: str, interval: str, table_id: str) -> None:
    """Strike the table off the interval's entry (a table rebuilt whole: rebuilt())."""
    entries = pending(pipeline)
    for entry in entries:
        if interval == entry["interval"] and table_id in entry["tables"]:
            entry["tables"].remove(table_id)
    _write(pipeline, [e for e in entries if e["tables"]])


def rebuilt(pipeline: str, table_id: str, upstreams: set[str]) -> None:
    """A table rebuilt whole from its upstreams as they are now: struck off every interval none of `upstreams` still
    owes. An interval an upstream still owes keeps it owed: it was rebuilt from the upstream's old rows of that
    interval, so it owes another rebuild once the upstream's slice lands (Airflow's gold task may run while the
    ingest task's reprocess is stopped at a gate)."""
    entries = pending(pipeline)
    for entry in entries:
        if table_id in entry["tables"] and not upstreams & set(entry["tables"]):
            entry["tables"].remove(table_id)
    _write(pipeline, [e for e in entries if e["tables"]])


def other_intervals(pipeline: str, interval: str) -> list[str]:
    """The intervals besides its own an unfinished reprocess of `interval` rebuilds downstream ([]: none, or no
    such entry)."""
    entry = next((e for e in pending(pipeline) if e["interval"] == interval), {})
    return list(entry.get("other_intervals", []))


def owed(pipeline: str) -> set[str]:
    """Every table some unfinished reprocess still owes."""
    return {table for entry in pending(pipeline) for table in entry["tables"]}


def _write(pipeline: str, entries: list[dict]) -> None:
    path = marker_path(pipeline)
    if not entries:
        path.unlink(missing_ok=True)
        return
    storage.write_whole(path, json.dumps({"pending": entries}, indent=2) + "\n")
