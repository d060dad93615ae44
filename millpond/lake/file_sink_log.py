"""Read a file-sink table's `_spark_metadata` log without a JVM: its batches, its files, their rows.

Spark's file sink commits each micro-batch as `_spark_metadata/<batch id>` (every 10th as `<id>.compact`,
holding all files so far) listing the files that batch added, and skips a batch id its log already holds, so a
batch replayed after a crash is not written twice. Files in the folder but not in the log (a batch killed
mid-write) are invisible to readers that go through the log (`spark.read.parquet(path)`), and to this module.

The newest batch id plays the part of a Delta table's version for the runner, `millpond status` and the event
log; rows are counted from the files themselves (parquet footers, json lines, csv records).
"""

from __future__ import annotations

import csv
import json

from millpond.lake import paths, storage
from millpond.lake.delta_log import TableState
from millpond.lake.delta_log import latest_version as delta_version
from millpond.lake.paths import LakePath, as_lake_path
from millpond.spec import Sink, Table

# Imported inside functions: pyarrow only to count a parquet file sink's rows.

METADATA = "_spark_metadata"


def latest_batch(path: LakePath | str) -> int:
    """Newest batch id the sink committed (-1 if none): a listing, like delta_log.latest_version."""
    return max((_batch_id(p) for p in _log_files(as_lake_path(path) / METADATA)), default=-1)


def files(path: LakePath | str, upto: int) -> set[str]:
    """Absolute paths of the files committed in batches 0..upto: the newest compact file at or before upto, then
    the batch files after it (a compact file holds every file of the batches it covers)."""
    log = as_lake_path(path) / METADATA
    entries = [p for p in _log_files(log) if _batch_id(p) <= upto]
    compacts = [p for p in entries if p.name.endswith(".compact")]
    start = _batch_id(compacts[-1]) if compacts else -1
    found: set[str] = set()
    for entry in entries:
        if _batch_id(entry) < start or (_batch_id(entry) == start and not entry.name.endswith(".compact")):
            continue
        for line in entry.read_text().splitlines()[1:]:  # first line: the log's version (`v1`)
            status = json.loads(line)
            # Spark writes the paths URL-encoded: a partition value with a space is `%20` in the log, not in the store.
            local = paths.from_uri(status["path"])
            if status.get("action", "add") == "add":
                found.add(local)
            else:
                found.discard(local)
    return found


def rows_in(file_paths: set[str], sink: Sink) -> int:
    """Rows in the given sink files, read the way Spark wrote them (one json object per line, a csv header)."""
    total = 0
    for name in file_paths:
        file = as_lake_path(name)
        if sink.format == "parquet":
            import pyarrow.parquet as pq

            with file.open("rb") as handle:
                total += pq.ParquetFile(handle).metadata.num_rows
        elif sink.format == "json":
            with file.open("rb") as handle:
                total += sum(1 for line in handle if line.strip())
        else:
            header = sink.options.get("header", "false").lower() == "true"
            with file.open(newline="", encoding="utf-8") as handle:  # quoted newlines: count records, not lines
                records = sum(1 for _ in csv.reader(handle))
            total += max(0, records - header) if records else 0
    return total


def rows_added(path: LakePath | str, sink: Sink, after: int, upto: int) -> int:
    """Rows committed in batches (after, upto]. A batch the sink skipped on replay added no file: it counts zero."""
    if upto <= after:
        return 0
    return rows_in(files(path, upto) - files(path, after), sink)


def table_state(path: LakePath | str, sink: Sink) -> TableState | None:
    if not (as_lake_path(path) / METADATA).is_dir():
        return None
    batch = latest_batch(path)
    live = files(path, batch)
    return TableState(version=batch, files=len(live), rows=rows_in(live, sink))


def table_version(table: Table, root: LakePath | None = None) -> int:
    """A table's newest version: the Delta version, or for a file sink the newest committed batch id."""
    path = paths.table_path(table.id, root)
    return latest_batch(path) if table.sink.is_file else delta_version(path)


def _log_files(folder: LakePath) -> list[LakePath]:
    entries = [p for p in storage.children(folder) if p.name.split(".")[0].isdigit() and p.is_file()]
    return sorted(entries, key=_batch_id)


def _batch_id(entry: LakePath) -> int:
    return int(entry.name.split(".")[0])
