"""Appends to millpond's own Delta tables (event log, validation results, a landing table's quarantine of carried
bad lines) by delta-rs, not by Spark.

A run that found nothing new then starts no JVM at all, and a run that did never pays a cold Spark Delta commit
for bookkeeping. Blind appends never conflict in Delta, so several pipelines (and Spark readers) share the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from millpond.lake import lease, storage
from millpond.lake.paths import LakePath, as_lake_path

if TYPE_CHECKING:  # annotations only: delta-rs and Arrow load when a table is written, not at import
    import pyarrow as pa
    from deltalake import DeltaTable

# Imported inside functions: deltalake and pyarrow only when a system table is written or read: the DAG processor
# imports the lake modules.

CHECKPOINT_INTERVAL = 10  # Spark's default: a reader replays at most this many JSON commits after a checkpoint
# The table properties under which a delta-rs commit is exactly what delta-spark would commit: the checkpoint
# interval (millpond checkpoints at it itself), retention periods (they steer cleanup and VACUUM, not commits), and
# append-only (honoured: delta-rs only appends, and small_overwrite refuses such a table). A table with any other
# `delta.*` property (a symlink manifest to regenerate, auto-optimize, change data feed, ...) is written by Spark.
EXACT_PROPERTIES = frozenset(
    {"delta.checkpointInterval", "delta.logRetentionDuration", "delta.deletedFileRetentionDuration", "delta.appendOnly"}
)


def append(
    path: LakePath | str,
    columns: Sequence[tuple[str, str]],
    rows: list[dict[str, Any]],
    app_id: str | None = None,
    batch_id: int | None = None,
    table: DeltaTable | None = None,
) -> int:
    """One commit of `rows` (dicts keyed by column); columns are (name, Spark SQL type). Returns the new version.

    With `app_id` and `batch_id` the commit carries Delta's `txn` action for them, as Spark's streaming writes do.
    `table`, an open delta-rs handle, commits on the snapshot the caller checked. The commit is a blind append (it
    read nothing of the table), as Spark marks one, so concurrent appends never conflict.
    """
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    transactions = [Transaction(app_id, batch_id)] if app_id is not None and batch_id is not None else None
    uri, options = storage.delta_rs_location(as_lake_path(path))
    lease.fence()
    write_deltalake(
        table if table is not None else uri,
        pa.Table.from_pylist(rows, schema=arrow_schema(columns)),
        mode="append",
        schema_mode="merge",  # merge: a column added in a later millpond version
        commit_properties=CommitProperties(app_transactions=transactions, custom_metadata={"isBlindAppend": True}),
        storage_options=options if table is None else None,
    )
    table = DeltaTable(uri, storage_options=options)
    checkpoint_as_spark_does(table)
    return table.version()


def checkpoint_as_spark_does(table: DeltaTable) -> None:
    """A checkpoint every `delta.checkpointInterval` commits, then the cleanup of log files older than
    `delta.logRetentionDuration`, as delta-spark does after a commit (delta-rs's own post-commit interval is 100)."""
    interval = int(table.metadata().configuration.get("delta.checkpointInterval", CHECKPOINT_INTERVAL))
    if table.version() % interval == 0:
        table.create_checkpoint()
        table.cleanup_metadata()


def open_table(path: LakePath | str) -> DeltaTable | None:
    """The table's delta-rs handle, or None if there is no table at `path`."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    if not (as_lake_path(path) / "_delta_log").is_dir():
        return None
    uri, options = storage.delta_rs_location(as_lake_path(path))
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return None


def driver_writable(table: DeltaTable) -> bool:
    """No table features beyond reader version 1 and writer version 2, no partitions, and no `delta.*` property but
    EXACT_PROPERTIES (a user's own property, `owner` say, changes nothing Delta writes): delta-rs writes it as Spark
    would."""
    protocol = table.protocol()
    metadata = table.metadata()
    return (
        protocol.min_reader_version <= 1
        and protocol.min_writer_version <= 2
        and not metadata.partition_columns
        and all(key in EXACT_PROPERTIES for key in metadata.configuration if key.startswith("delta."))
    )


def arrow_schema(columns: Sequence[tuple[str, str]]) -> pa.Schema:
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "boolean": pa.bool_(),
        "double": pa.float64(),
    }
    return pa.schema([(name, types[kind]) for name, kind in columns])
