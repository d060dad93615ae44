"""The event log: one Delta row per table per run under `$MILLPOND_LAKE/_system/event_log`.

Appended once at the end of each run (also a failed one) by delta-rs (millpond.lake.system_tables), so a run that
found nothing new starts no JVM at all.
"""

from __future__ import annotations

import socket
from dataclasses import asdict
from datetime import datetime

from millpond.lake import paths, system_tables
from millpond.runs import run_summary
from millpond.runs.run_record import RunContext, TableResult

# (column, Spark SQL type): the table's schema, which readers query with Spark SQL.
COLUMNS = (
    ("run_id", "string"),
    ("pipeline", "string"),
    ("table", "string"),
    ("layer", "string"),
    ("trigger", "string"),
    ("data_interval_start", "timestamp"),
    ("data_interval_end", "timestamp"),
    ("started_at", "timestamp"),
    ("ended_at", "timestamp"),
    ("micro_batches", "int"),
    ("rows_in", "bigint"),
    ("rows_written", "bigint"),
    ("rows_quarantined", "bigint"),
    ("rows_dropped_by_watermark", "bigint"),
    ("state_rows", "bigint"),
    ("version_before", "bigint"),
    ("version_after", "bigint"),
    ("full_refresh", "boolean"),
    ("outcome", "string"),
    ("error", "string"),
    ("host", "string"),
    ("watermark", "timestamp"),
    ("processed_rows_per_second", "double"),
    ("reprocess_start", "timestamp"),
    ("reprocess_end", "timestamp"),
    ("rows_replaced", "bigint"),
    ("backlog_files", "bigint"),
    ("backlog_bytes", "bigint"),
    ("backlog_rows", "bigint"),
    ("backlog_batches", "bigint"),
)

# `_system/query_progress`: one row per micro-batch, from Spark's StreamingQueryListener (millpond/driver/progress.py).
PROGRESS_COLUMNS = (
    ("run_id", "string"),
    ("pipeline", "string"),
    ("table", "string"),
    ("batch_id", "bigint"),
    ("started_at", "timestamp"),
    ("duration_ms", "bigint"),
    ("input_rows", "bigint"),
    ("input_rows_per_second", "double"),
    ("processed_rows_per_second", "double"),
    ("state_rows", "bigint"),
    ("state_memory_bytes", "bigint"),
    ("rows_dropped_by_watermark", "bigint"),
    ("watermark", "timestamp"),
)


def append(pipeline: str, run: RunContext, results: list[TableResult]) -> int | None:
    """One commit for the whole run (a killed run has no finished rows to lose); returns the new version."""
    if not results:
        return None
    host = socket.gethostname()
    context = {
        "run_id": run.run_id,
        "pipeline": pipeline,
        "trigger": run.trigger,
        "host": host,
        "data_interval_start": run.data_interval_start,
        "data_interval_end": run.data_interval_end,
    }
    rows = [{name: context[name] if name in context else getattr(r, name) for name, _ in COLUMNS} for r in results]
    return system_tables.append(paths.event_log_path(), COLUMNS, rows)


def append_progress(rows: list[dict]) -> None:
    """The run's micro-batches in one commit (none when no query ran: nothing-new runs start no JVM)."""
    if rows:
        system_tables.append(paths.query_progress_path(), PROGRESS_COLUMNS, rows)


def write_run_summary(pipeline: str, run: RunContext, results: list[TableResult]) -> str:
    """The same rows as JSON, for readers without Spark (Airflow summary task, `millpond status`)."""
    tables = [
        {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(r).items()}
        | {"path": str(paths.table_path(r.table)), "seconds": round(r.seconds, 2)}
        for r in results
    ]
    interval = run_summary.interval_text(run.data_interval_start, run.data_interval_end)
    return str(run_summary.merge(pipeline, run.run_id, run.trigger, tables, interval))
