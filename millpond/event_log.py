"""The event log: one Delta row per table per run under `$MILLPOND_LAKE/_system/event_log`.

Appended once at the end of each run (also a failed one) by delta-rs, Delta Lake's Rust writer, not by Spark: a
run that found nothing new then starts no JVM at all, and a run that did never pays a Delta commit for it. Blind
appends never conflict in Delta, so several pipelines (and Spark readers) share the table safely.
"""

from __future__ import annotations

import socket
from dataclasses import asdict
from datetime import datetime

from millpond import paths, run_summary
from millpond.run_record import RunContext, TableResult

# (column, Spark SQL type): the table's schema, which readers query with Spark SQL.
COLUMNS = (
    ("run_id", "string"), ("pipeline", "string"), ("table", "string"), ("layer", "string"), ("trigger", "string"),
    ("data_interval_start", "timestamp"), ("data_interval_end", "timestamp"), ("started_at", "timestamp"),
    ("ended_at", "timestamp"), ("micro_batches", "int"), ("rows_in", "bigint"), ("rows_written", "bigint"),
    ("rows_quarantined", "bigint"), ("rows_dropped_by_watermark", "bigint"), ("state_rows", "bigint"),
    ("version_before", "bigint"), ("version_after", "bigint"), ("full_refresh", "boolean"), ("outcome", "string"),
    ("error", "string"), ("host", "string"),
)  # fmt: skip
CHECKPOINT_INTERVAL = 10  # Spark's default: a reader replays at most this many JSON commits after a checkpoint


def append(pipeline: str, run: RunContext, results: list[TableResult]) -> int | None:
    """One commit for the whole run (a killed run has no finished rows to lose); returns the new version."""
    if not results:
        return None
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    host = socket.gethostname()
    context = {"run_id": run.run_id, "pipeline": pipeline, "trigger": run.trigger, "host": host,
               "data_interval_start": run.data_interval_start, "data_interval_end": run.data_interval_end}  # fmt: skip
    rows = [{name: context[name] if name in context else getattr(r, name) for name, _ in COLUMNS} for r in results]
    path = str(paths.event_log_path())
    write_deltalake(path, pa.Table.from_pylist(rows, schema=arrow_schema()), mode="append")
    table = DeltaTable(path)
    if table.version() % CHECKPOINT_INTERVAL == 0:
        table.create_checkpoint()
    return table.version()


def arrow_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"), "int": pa.int32(),
             "bigint": pa.int64(), "boolean": pa.bool_()}  # fmt: skip
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS])


def write_run_summary(pipeline: str, run: RunContext, results: list[TableResult]) -> str:
    """The same rows as JSON, for readers without Spark (Airflow summary task, `millpond status`)."""
    tables = [
        {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(r).items()}
        | {"path": str(paths.table_path(r.table)), "seconds": round(r.seconds, 2)}
        for r in results
    ]
    return str(run_summary.merge(pipeline, run.run_id, run.trigger, tables))
