"""The event log: one Delta row per table per run under `$MILLPOND_LAKE/_system/event_log`.

Appended once at the end of each run (also a failed one). Blind appends never conflict in Delta, so several
pipelines may log at once.
"""

from __future__ import annotations

import socket
from dataclasses import asdict
from datetime import datetime

from pyspark.sql import SparkSession

from millpond import paths, run_summary
from spark_jobs.streaming import RunContext, TableResult

SCHEMA = (
    "run_id STRING, pipeline STRING, table STRING, layer STRING, trigger STRING, "
    "data_interval_start TIMESTAMP, data_interval_end TIMESTAMP, started_at TIMESTAMP, ended_at TIMESTAMP, "
    "micro_batches INT, rows_in BIGINT, rows_written BIGINT, rows_quarantined BIGINT, "
    "rows_dropped_by_watermark BIGINT, state_rows BIGINT, version_before BIGINT, version_after BIGINT, "
    "full_refresh BOOLEAN, outcome STRING, error STRING, host STRING"
)


def append(spark: SparkSession, pipeline: str, run: RunContext, results: list[TableResult]) -> None:
    """One commit for the whole run: a Delta commit costs ~0.5 s, and a killed run has no finished rows to lose."""
    rows = [
        (
            run.run_id, pipeline, r.table, r.layer, run.trigger, run.data_interval_start, run.data_interval_end,
            r.started_at, r.ended_at, r.micro_batches, r.rows_in, r.rows_written, r.rows_quarantined,
            r.rows_dropped_by_watermark, r.state_rows, r.version_before, r.version_after, r.full_refresh, r.outcome,
            r.error, socket.gethostname(),
        )  # fmt: skip
        for r in results
    ]
    if rows:
        spark.createDataFrame(rows, SCHEMA).write.format("delta").mode("append").save(str(paths.event_log_path()))


def write_run_summary(pipeline: str, run: RunContext, results: list[TableResult]) -> str:
    """The same rows as JSON, for readers without Spark (Airflow summary task, `millpond status`)."""
    tables = [
        {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(r).items()}
        | {"path": str(paths.table_path(r.table)), "seconds": round(r.seconds, 2)}
        for r in results
    ]
    return str(run_summary.merge(pipeline, run.run_id, run.trigger, tables))
