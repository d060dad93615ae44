"""The event log: one Delta row per table per run under `$MILLPOND_LAKE/_system/event_log`.

Appended after each table (not at the end of the run), so a crash mid-run still leaves the finished tables'
rows. Blind appends never conflict in Delta, so several pipelines may log at once.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from millpond import paths
from spark_jobs.streaming import RunContext, TableResult

SCHEMA = (
    "run_id STRING, pipeline STRING, table STRING, layer STRING, trigger STRING, "
    "data_interval_start TIMESTAMP, data_interval_end TIMESTAMP, started_at TIMESTAMP, ended_at TIMESTAMP, "
    "micro_batches INT, rows_in BIGINT, rows_written BIGINT, rows_quarantined BIGINT, "
    "rows_dropped_by_watermark BIGINT, state_rows BIGINT, version_before BIGINT, version_after BIGINT, "
    "full_refresh BOOLEAN, outcome STRING, error STRING, host STRING"
)


def append(spark: SparkSession, pipeline: str, run: RunContext, result: TableResult) -> None:
    row = (
        run.run_id, pipeline, result.table, result.layer, run.trigger, run.data_interval_start, run.data_interval_end,
        result.started_at, result.ended_at, result.micro_batches, result.rows_in, result.rows_written,
        result.rows_quarantined, result.rows_dropped_by_watermark, result.state_rows, result.version_before,
        result.version_after, result.full_refresh, result.outcome, result.error, socket.gethostname(),
    )  # fmt: skip
    spark.createDataFrame([row], SCHEMA).write.format("delta").mode("append").save(str(paths.event_log_path()))


def write_run_summary(pipeline: str, run: RunContext, results: list[TableResult]) -> str:
    """A small JSON per run for readers without Spark (the Airflow summary task, `make demo`)."""
    folder = paths.system_path("runs") / pipeline
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{_safe(run.run_id)}.json"
    body = {
        "pipeline": pipeline,
        "run_id": run.run_id,
        "trigger": run.trigger,
        "written_at": datetime.now(UTC).isoformat(),
        "tables": [
            {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(r).items() if k != "batch_ids"}
            | {"path": str(paths.table_path(r.table)), "seconds": round(r.seconds, 2)}
            for r in results
        ],
    }
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2, default=str))
    os.replace(tmp, target)
    return str(target)


def _safe(run_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
