"""The one streaming contract every table goes through.

Each table is a named query with its own checkpoint, the spec's trigger, awaitTermination and a raised error
naming the table. Every micro-batch reaches its sink through `foreachBatch` (millpond.driver.sinks: one class per
write strategy, each Delta commit carrying Delta's `txn` action for the checkpoint's query id and the batch id), except
a file-sink table's (`sink: {format: parquet|json|csv}`): Spark's own file sink writes it, exactly once through the
sink's `_spark_metadata` log, which skips a batch id it already committed.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql.utils import CapturedException

from millpond.driver import column_comments, sources
from millpond.driver.faults import inject_fault
from millpond.driver.plan import plan_table
from millpond.driver.progress import ProgressListener, watermark_of
from millpond.driver.sinks import sink_for
from millpond.lake import checkpoints, file_sink_log, lease, paths, storage
from millpond.lake.delta_log import latest_version as delta_version
from millpond.lake.delta_log import rows_added
from millpond.lake.paths import LakePath
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import Pipeline, Table

if TYPE_CHECKING:
    from millpond.driver.targets import Target


class TableFailed(RuntimeError):
    def __init__(self, table_id: str, message: str, result: TableResult | None = None):
        super().__init__(f"table {table_id} failed: {message}")
        self.table_id, self.result = table_id, result


def checkpoint_query_id(checkpoint: LakePath) -> str:
    """The checkpoint's stable query id (Spark's `metadata` file), written by us first if the checkpoint is new."""
    metadata = checkpoint / "metadata"
    if metadata.exists():
        return json.loads(metadata.read_text().splitlines()[0])["id"]
    query_id = str(uuid.uuid4())
    storage.write_whole(metadata, json.dumps({"id": query_id}) + "\n")
    return query_id


def start_query(
    spark: SparkSession,
    target: Target,
    pipeline: Pipeline,
    table: Table,
    run: RunContext,
    result: TableResult,
    listener: ProgressListener,
) -> StreamingQuery:
    lease.fence(pipeline.name)  # an object-store lake: a run that lost its lease stops before touching the checkpoint
    checkpoint = paths.checkpoint_path(pipeline.name, table.id)
    app_id = f"millpond:{checkpoint_query_id(checkpoint)}"
    df = plan_table(
        sources.read_table_source(spark, pipeline, table),
        table,
        sources.read_join_source(spark, pipeline, table),
        sources.read_dimension(spark, pipeline, table),
    )
    if table.column_comments and column_comments.refuses_unknown(table):  # else the writer makes the columns
        column_comments.check_planned(pipeline, table, df.columns)
    writer = (
        df.writeStream.queryName(paths.query_name(pipeline.name, table.id))
        .option("checkpointLocation", str(checkpoint))
        .outputMode(table.query_output_mode)
    )
    if table.sink.is_file:
        # Spark's own file sink: exactly once through its `_spark_metadata` log (a replayed batch id is skipped).
        writer = writer.format(table.sink.format).options(**table.sink.options)
        writer = writer.option("path", str(paths.table_path(table.id)))
    else:
        sink = sink_for(spark, pipeline, table, app_id, run, result, listener)
        writer = writer.foreachBatch(target.batch_function(sink, table.id))
    if table.trigger.kind == "availableNow":
        writer = writer.trigger(availableNow=True)
    elif table.trigger.kind == "once":
        writer = writer.trigger(once=True)
    else:
        assert table.trigger.interval is not None  # the spec loader sets it for every processingTime trigger
        writer = writer.trigger(processingTime=table.trigger.interval)
    return writer.start()


def run_table(
    spark: SparkSession,
    target: Target,
    pipeline: Pipeline,
    table: Table,
    run: RunContext,
    full_refresh: bool,
    listener: ProgressListener,
) -> TableResult:
    """Drain what is new for one table, then record what happened; raises TableFailed naming the table.

    `listener` is registered on the session (progress.listening) before the query starts: it has every batch.
    """
    path, quarantine = paths.table_path(table.id), paths.quarantine_path(table.id)
    result = TableResult(table.id, table.layer, datetime.now(UTC), full_refresh=full_refresh)
    result.version_before, quarantine_before = file_sink_log.table_version(table), delta_version(quarantine)
    error = None
    try:
        checkpoints.verify(pipeline, table, rebuild=full_refresh)
        if table.reads_change_feed(table.source):
            lease.fence(pipeline.name)  # an object-store lake: still the pipeline's one writer before a commit
            # before the fingerprint: it may add an upstream version
            sources.enable_change_feed_upstream(spark, pipeline, table)
        fingerprint = checkpoints.input_fingerprint(pipeline, table)
        previous = checkpoints.nothing_new(pipeline, table, fingerprint)
        if previous is not None:  # the query would find nothing: skip its start (seconds per table, B5)
            result.input_unchanged, result.state_rows = True, int(previous.get("state_rows", 0))
        else:
            query = start_query(spark, target, pipeline, table, run, result, listener)
            try:
                if table.trigger.kind == "processingTime":
                    query.processAllAvailable()  # a scheduled run drains what is there, then yields the slot
                    query.stop()
                target.await_query(query)
            finally:  # on the engine, what the batches counted comes back from the server's worker
                target.collect(result, listener, table.id)
            inject_fault(table.id, "after_query")  # every batch committed; millpond's own records not yet
            collect_progress(listener.progress_of(query), table, result)
            checkpoints.record_shape(pipeline, table)
            checkpoints.record_input(pipeline, table, fingerprint, result.state_rows)
    except (CapturedException, SparkConnectGrpcException) as exc:
        error = result.error or _first_line(exc)  # a message the batch writer left (schema drift) beats Spark's
        hint = storage_error_fix(str(exc)) or checkpoints.spark_error_fix(pipeline, table, str(exc))
        error = f"{error} -- {hint}" if hint else error
    except (
        checkpoints.CheckpointProblem,
        sources.DimensionProblem,
        sources.ChangeFeedOff,
        column_comments.UnknownColumn,
    ) as exc:
        error = str(exc)
    except OSError as exc:  # our own checkpoint files (metadata, millpond.json) on a full or read-only lake
        error = f"{exc} -- {storage_error_fix(str(exc)) or 'storage error'}"
    result.ended_at = datetime.now(UTC)
    result.version_after = file_sink_log.table_version(table)
    result.outcome = "failed" if error else "succeeded"
    result.error = error
    if result.gate and result.gate["outcome"] == "failed":
        result.outcome = "gate_failed"  # the query stopped on purpose: the gate raised before writing the batch
        result.error = error = gate_message(table, result)
    if table.sink.is_file:
        result.rows_written = file_sink_log.rows_added(path, table.sink, result.version_before, result.version_after)
    elif table.sink.is_delta:  # a Kafka sink's writer counts what it sent (a replayed batch again: sent again)
        result.rows_written = rows_added(
            path, result.version_before, result.version_after, newest_only=table.output_mode == "complete"
        )
    result.rows_quarantined = rows_added(quarantine, quarantine_before, delta_version(quarantine))
    if not error and table.column_comments and table.sink.is_delta:  # after the counts: it commits no rows
        error = describe_columns(spark, pipeline, table, result)
    if error:
        raise TableFailed(table.id, error, result)
    inject_fault(table.id, "after_table")
    return result


def describe_columns(spark: SparkSession, pipeline: Pipeline, table: Table, result: TableResult) -> str | None:
    """Commit the spec's column descriptions the table lacks (millpond.driver.column_comments), the table's version
    after the run then counting that commit, and record that the table is described; the error (also the
    result's), or None. A described column the table's writer did not make is warned about on every run."""
    error = None
    try:
        changed, warning = column_comments.commit(spark, pipeline, table)
        if changed:
            print(f"millpond: {table.id}: described {', '.join(changed)} (the spec's `columns:`, one commit)")
            result.version_after = file_sink_log.table_version(table)  # the comment commit counts
        if warning:
            print(f"millpond: warning: {warning}", file=sys.stderr)
    except column_comments.UnknownColumn as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - Spark's, the log's or the store's: the table's failure, named
        error = f"{table.id}: its column descriptions were not committed: {_first_line(exc)}"
    if error:
        result.version_after = file_sink_log.table_version(table)  # an ALTER that failed late may have committed
        result.outcome, result.error = "failed", error
    else:
        checkpoints.record_described(pipeline, table, result.version_after, column_comments.digest(table))
    return error


def gate_message(table: Table, result: TableResult) -> str:
    gate = result.gate or {}
    failures = "; ".join(
        f"expectation {f['expectation']} ({f['severity']}) failed with {f['unexpected_count']} unexpected rows"
        for f in gate.get("failed_expectations", [])
    )
    return (
        f"data-quality gate failed: suite {gate.get('suite')}: {failures}. Report: {gate.get('report_path')} "
        f"(index {gate.get('index_path')}). {table.id} and its downstream tables are unchanged"
    )


def collect_progress(progresses: list[StreamingQueryProgress], table: Table, result: TableResult) -> None:
    """Fold the run's batches into the table's result."""
    if not table.reads_source:  # a source table's writer counts its records (blank ones and null values aside)
        result.rows_in = sum(p.numInputRows for p in progresses)
    if table.sink.is_file:  # no foreachBatch to count them
        result.micro_batches = len({p.batchId for p in progresses})
    for progress in progresses:
        for phase, ms in (progress.durationMs or {}).items():
            result.durations_ms[phase] = result.durations_ms.get(phase, 0) + int(ms)
        for state in progress.stateOperators:
            result.rows_dropped_by_watermark += state.numRowsDroppedByWatermark
    if progresses and progresses[-1].stateOperators:
        result.state_rows = sum(s.numRowsTotal for s in progresses[-1].stateOperators)
    if progresses:
        result.watermark = watermark_of(progresses[-1])
        seconds = sum(p.batchDuration for p in progresses) / 1000
        result.processed_rows_per_second = round(result.rows_in / seconds, 1) if seconds > 0 else None


STORAGE_ERRORS = {
    "No space left on device": "the disk holding it is full. Fix: free space there",
    "Disk quota exceeded": "the disk quota is used up. Fix: free space or raise the quota",
    "Permission denied": "this user may not write there. Fix: give the user running millpond write access",
    "AccessDeniedException": "this user may not write there. Fix: give the user running millpond write access",
    "Read-only file system": "the file system is read-only. Fix: remount it read-write",
}


def storage_error_fix(message: str) -> str | None:
    """A lake storage failure in plain words. Delta commits are atomic, so readers still see the last version."""
    for marker, what in STORAGE_ERRORS.items():
        if marker in message:
            return (
                f"storage error writing the lake {paths.lake_root()}: {what}, then rerun; the failed batch was "
                "not committed, readers still see the previous table version, and the rerun writes it once"
            )
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:2000] if text else type(exc).__name__
