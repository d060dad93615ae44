"""Appends to millpond's own Delta tables (event log, validation results, a landing table's quarantine of carried
bad lines) by delta-rs, not by Spark.

A run that found nothing new then starts no JVM at all, and a run that did never pays a cold Spark Delta commit
for bookkeeping. Blind appends never conflict in Delta, so several pipelines (and Spark readers) share the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from millpond.delta_log import txn_marker

CHECKPOINT_INTERVAL = 10  # Spark's default: a reader replays at most this many JSON commits after a checkpoint


def append(path: Path, columns: Sequence[tuple[str, str]], rows: list[dict[str, Any]], app_id: str | None = None,
           batch_id: int | None = None) -> int:  # fmt: skip
    """One commit of `rows` (dicts keyed by column); columns are (name, Spark SQL type). Returns the new version.

    With `app_id` and `batch_id` the commit names them as Spark's writes do (Delta's `txn` action and millpond's
    `userMetadata` marker), so `delta_log.committed_batch` finds it and a replayed batch skips it.
    """
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    named = None
    if app_id is not None and batch_id is not None:
        named = CommitProperties(app_transactions=[Transaction(app_id, batch_id)],
                                 custom_metadata={"userMetadata": txn_marker(app_id, batch_id)})  # fmt: skip
    write_deltalake(str(path), pa.Table.from_pylist(rows, schema=arrow_schema(columns)), mode="append",
                    schema_mode="merge", commit_properties=named)  # merge: a column added in a later millpond version
    table = DeltaTable(str(path))
    if table.version() % CHECKPOINT_INTERVAL == 0:
        table.create_checkpoint()
    return table.version()


def takes_driver_commit(path: Path) -> bool:
    """Whether delta-rs commits to this table as Spark would: it does not exist yet (delta-rs creates it at reader
    version 1, writer version 2, like Spark), or `driver_writable`."""
    table = open_table(path)
    return table is None or driver_writable(table)


def open_table(path: Path):
    """The table's delta-rs handle, or None if there is no table at `path`."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    if not (Path(path) / "_delta_log").is_dir():
        return None
    try:
        return DeltaTable(str(path))
    except TableNotFoundError:
        return None


def driver_writable(table) -> bool:
    """No table features beyond reader version 1 and writer version 2, and no partitions: delta-rs writes it as
    Spark would."""
    protocol = table.protocol()
    return protocol.min_reader_version <= 1 and protocol.min_writer_version <= 2 and not table.metadata().partition_columns


def arrow_schema(columns: Sequence[tuple[str, str]]):
    import pyarrow as pa

    types = {"string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"), "int": pa.int32(),
             "bigint": pa.int64(), "boolean": pa.bool_(), "double": pa.float64()}  # fmt: skip
    return pa.schema([(name, types[kind]) for name, kind in columns])
