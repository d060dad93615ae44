"""Appends to millpond's own Delta tables (event log, validation results) by delta-rs, not by Spark.

A run that found nothing new then starts no JVM at all, and a run that did never pays a cold Spark Delta commit
for bookkeeping. Blind appends never conflict in Delta, so several pipelines (and Spark readers) share the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHECKPOINT_INTERVAL = 10  # Spark's default: a reader replays at most this many JSON commits after a checkpoint


def append(path: Path, columns: Sequence[tuple[str, str]], rows: list[dict[str, Any]]) -> int:
    """One commit of `rows` (dicts keyed by column); columns are (name, Spark SQL type). Returns the new version."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(path), pa.Table.from_pylist(rows, schema=arrow_schema(columns)), mode="append",
                    schema_mode="merge")  # a column added in a later millpond version: older rows read null
    table = DeltaTable(str(path))
    if table.version() % CHECKPOINT_INTERVAL == 0:
        table.create_checkpoint()
    return table.version()


def arrow_schema(columns: Sequence[tuple[str, str]]):
    import pyarrow as pa

    types = {"string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"), "int": pa.int32(),
             "bigint": pa.int64(), "boolean": pa.bool_(), "double": pa.float64()}  # fmt: skip
    return pa.schema([(name, types[kind]) for name, kind in columns])
