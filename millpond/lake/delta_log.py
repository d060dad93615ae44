"""Read a Delta table's size and properties from its transaction log without a JVM (status, demo output, Airflow
summaries, whether its change data feed is on before a run or a preview asks Spark).

Replays the newest checkpoint (parquet) plus the JSON commits after it and sums `numRecords` from the
per-file statistics Delta writes with every added file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from millpond.lake.paths import LakePath, as_lake_path

# The table property that makes Delta record each commit's row changes (its change data feed, `readChangeFeed`).
CHANGE_FEED_PROPERTY = "delta.enableChangeDataFeed"


def change_feed_on(path: LakePath | str) -> bool | None:
    """Whether Delta records the table's changes now (a reader of its feed needs that for every version it reads);
    None where the log keeps its properties where this reader does not look (another writer's v2 checkpoint)."""
    properties = table_properties(path)
    return None if properties is None else str(properties.get(CHANGE_FEED_PROPERTY, "")).lower() == "true"


@dataclass(frozen=True)
class TableState:
    version: int
    files: int
    rows: int


def table_state(path: LakePath | str) -> TableState | None:
    files = live_files(path)
    if files is None:
        return None
    version, live = files
    return TableState(version=version, files=len(live), rows=sum(f.rows for f in live.values()))


@dataclass(frozen=True)
class LiveFile:
    size: int
    rows: int
    modification_time: int
    stats: str | None  # Delta's per-file statistics as written (JSON): numRecords, minValues, maxValues, nullCount


def live_files(path: LakePath | str, version: int | None = None) -> tuple[int, dict[str, LiveFile]] | None:
    """(the version read, each live data file by path) at `version` (default: the newest), or None for no table:
    the newest checkpoint at or before it (parquet) plus the JSON commits after, replayed."""
    log = as_lake_path(path) / "_delta_log"
    if not log.is_dir():
        return None
    live: dict[str, LiveFile] = {}
    start = -1
    last_checkpoint = log / "_last_checkpoint"
    if last_checkpoint.exists() and (version is None or json.loads(last_checkpoint.read_text())["version"] <= version):
        import pyarrow.parquet as pq  # only tables with 10+ commits have a checkpoint

        start = json.loads(last_checkpoint.read_text())["version"]
        parts: list[LakePath] = list(log.glob(f"{start:020d}.checkpoint*.parquet"))
        for part in sorted(parts, key=str):
            with part.open("rb") as handle:
                adds = pq.read_table(handle, columns=["add"])
            for add in adds.column("add").to_pylist():
                if add:
                    live[add["path"]] = _live(add)
    read = start
    commits: list[LakePath] = list(log.glob("*.json"))
    for commit in sorted(commits, key=str):
        number = int(commit.name.split(".")[0])
        if number <= start or (version is not None and number > version):
            continue
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = _live(action["add"])
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
        read = number
    return read, live


def _live(add: dict) -> LiveFile:
    stats = add.get("stats")
    return LiveFile(int(add.get("size") or 0), file_rows(stats), int(add.get("modificationTime") or 0), stats)


def file_rows(stats: str | None) -> int:
    """A data file's rows from the statistics Delta writes with it (0 without them)."""
    return int(json.loads(stats).get("numRecords", 0)) if stats else 0


def latest_version(path: LakePath | str) -> int:
    """Newest committed version from the log's file names (-1 if there is no table): a listing, no JVM."""
    return max(_commit_versions(as_lake_path(path) / "_delta_log"), default=-1)


def _commit_versions(log: LakePath) -> list[int]:
    """Versions of the log's commit files (`<20 digits>.json`; not checkpoints, checksums or compacted ranges)."""
    return [int(p.name[:20]) for p in log.glob("*.json") if len(p.name) == 25 and p.name[:20].isdigit()]


def created_at(path: LakePath | str) -> datetime | None:
    """When the table's first commit (version 0) was made, from its `commitInfo`; None for no table, or a log cleaned
    up past its first commit."""
    first = as_lake_path(path) / "_delta_log" / f"{0:020d}.json"
    if not first.exists():
        return None
    for line in first.read_text(encoding="utf-8").splitlines():
        if '"commitInfo"' in line and "timestamp" in (info := json.loads(line).get("commitInfo") or {}):
            return datetime.fromtimestamp(int(info["timestamp"]) / 1000, UTC)
    return None


def table_properties(path: LakePath | str) -> dict[str, str] | None:
    """The table's properties (its newest `metaData` action's `configuration`; {} for no table), or None where the
    log keeps its metadata where this reader does not look (see newest_metadata)."""
    metadata = newest_metadata(path)
    return None if metadata is None else dict(metadata.get("configuration") or {})


def column_comments(path: LakePath | str) -> dict[str, str | None] | None:
    """Each top-level column of the table with its comment (None: none), from its newest schema; {} for no table,
    None where this reader cannot find the schema (see newest_metadata)."""
    metadata = newest_metadata(path)
    if not metadata:
        return metadata
    fields = json.loads(metadata["schemaString"])["fields"]
    return {f["name"]: (f.get("metadata") or {}).get("comment") for f in fields}


def newest_metadata(path: LakePath | str) -> dict | None:
    """The table's newest `metaData` action ({} for no table): the newest commit after the last checkpoint that
    changed it, else the checkpoint's. None when neither holds it: a checkpoint in a form this reader does not read
    (v2's `<version>.checkpoint.<uuid>.json`, sidecars), or a log cleaned up past its last checkpoint."""
    log = as_lake_path(path) / "_delta_log"
    if not log.is_dir():
        return {}
    start = -1
    last_checkpoint = log / "_last_checkpoint"
    if last_checkpoint.exists():
        start = json.loads(last_checkpoint.read_text())["version"]
    for version in sorted((v for v in _commit_versions(log) if v > start), reverse=True):
        for line in (log / f"{version:020d}.json").read_text(encoding="utf-8").splitlines():
            if '"metaData"' in line and "metaData" in (action := json.loads(line)):
                return dict(action["metaData"])
    if start < 0:
        return None
    import pyarrow.parquet as pq  # only tables with 10+ commits have a checkpoint

    parts: list[LakePath] = list(log.glob(f"{start:020d}.checkpoint*.parquet"))
    for part in sorted(parts, key=str):
        with part.open("rb") as handle:
            for entry in pq.read_table(handle, columns=["metaData"]).column("metaData").to_pylist():
                if entry:
                    return dict(entry)
    return None


def committed_batch_in(path: LakePath | str, after: int, app_id: str, batch_id: int) -> bool:
    """Whether a commit after version `after` carries Delta's `txn` action for this app and batch: how a writer
    learns that its own write committed (Delta records even an empty append that has one) and was not skipped as a
    replay, whatever other writers committed meanwhile."""
    log = as_lake_path(path) / "_delta_log"
    for version in sorted(v for v in _commit_versions(log) if v > after):
        for line in (log / f"{version:020d}.json").read_text(encoding="utf-8").splitlines():
            if '"txn"' in line:
                txn = json.loads(line).get("txn") or {}
                if txn.get("appId") == app_id and txn.get("version") == batch_id:
                    return True
    return False


def rows_added(path: LakePath | str, after: int, upto: int, newest_only: bool = False) -> int:
    """Rows committed in versions (after, upto], from each commit's `operationMetrics.numOutputRows`.

    `newest_only` is for complete-mode tables, where the newest overwrite *is* the table. A batch Delta skipped on
    replay (its batch id already committed) made no commit, so it counts zero, as it should.
    """
    counts = []
    for version in range(after + 1, upto + 1):
        commit = as_lake_path(path) / "_delta_log" / f"{version:020d}.json"
        for line in commit.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info is not None:
                counts.append(_rows_written(info))
    if newest_only:
        return counts[-1] if counts else 0
    return sum(counts)


def bytes_added(path: LakePath | str, after: int, upto: int) -> int:
    """Bytes of the data files committed in versions (after, upto] (`add` actions that change data)."""
    total = 0
    for version in range(after + 1, upto + 1):
        for line in (
            (as_lake_path(path) / "_delta_log" / f"{version:020d}.json").read_text(encoding="utf-8").splitlines()
        ):
            added = json.loads(line).get("add")
            total += added["size"] if added and added.get("dataChange", True) else 0
    return total


def _rows_written(commit_info: dict) -> int:
    """A MERGE's numOutputRows also counts unchanged rows it copied: count the rows it inserted or updated."""
    metrics = commit_info.get("operationMetrics") or {}
    if commit_info.get("operation") == "MERGE":
        return int(metrics.get("numTargetRowsInserted", 0)) + int(metrics.get("numTargetRowsUpdated", 0))
    return int(metrics.get("numOutputRows", metrics.get("num_added_rows", 0)))  # delta-spark, delta-rs
