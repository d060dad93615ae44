"""The one streaming contract every table goes through.

Each table is a named query with its own checkpoint, the spec's trigger, awaitTermination and a raised error
naming the table. Every micro-batch reaches Delta through `foreachBatch` as Delta's own idempotent write: each
commit of a table or its quarantine (append, overwrite, MERGE, first write or later) carries Delta's `txn` action
(`txnAppId` = the checkpoint's query id, `txnVersion` = the batch id), and Delta skips a batch replayed after a crash
(offsets logged, commit not yet) whose id the app already committed. A delta-rs commit (MILLPOND_DELTA_RS_COMMITS)
carries the same action. The app id is the checkpoint's query id: a new checkpoint never inherits an old one's
transaction history.
A file-sink table (`sink: {format: parquet|json|csv}`) is the exception: Spark's own file sink writes it,
exactly once through the sink's `_spark_metadata` log, which skips a batch id it already committed.
A Kafka-sink table (`sink: {format: kafka}`) sends each batch to a topic from `foreachBatch`: at least once, since a
topic has nothing like a Delta commit to name and skip a batch replayed after a crash.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from datetime import UTC, datetime
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType
from pyspark.sql.utils import CapturedException

from millpond import settings
from millpond.engine import sources
from millpond.engine.plan import plan_table
from millpond.engine.progress import ProgressListener, watermark_of
from millpond.engine.speedups import DELTA_RS_COMMITS
from millpond.lake import checkpoints, file_sink_log, paths, small_overwrite, system_tables
from millpond.lake.delta_log import committed_batch_in, rows_added
from millpond.lake.delta_log import latest_version as delta_version
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import Pipeline, Table, resolve_setting

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"  # Delta's idempotent-DML session confs (MERGE included)
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
FAULT_ENV = settings.FAULT.name  # "<table id>:<point>[:<batch id>]": SIGKILL this process there (fault tests)
# A landing batch's bad lines ride out of its one pass in the observed metrics (a bounded heap, `min_by(.., k)`)
# when there are at most this many, each at most CARRIED_RAW_BYTES of raw text (so at most ~40 MB reach the
# driver); otherwise the quarantine pass reads them again. B3: the second read cost 5 s of a 39 s batch.
CARRIED_BAD_LINES, CARRIED_RAW_BYTES = 5000, 8192
# A landing table's quarantine: each bad line's kept text, its file (or Kafka address), why, and which run.
LANDING_QUARANTINE_COLUMNS = (
    ("raw", "string"),
    ("source_file", "string"),
    ("reason", "string"),
    ("rule", "string"),
    ("run_id", "string"),
    ("quarantined_at", "timestamp"),
)


def landing_batch_metrics(rereadable: bool) -> list[Column]:
    """What the one pass over a parsed landing batch counts beside writing it: rows, bad rows, the bad lines
    themselves when few and short (CARRIED_BAD_LINES), and, if they can be read again, their buckets and files
    (bounded however bad the batch is: LINE_BUCKETS buckets, the batch's files)."""
    is_bad = F.col(sources.ERROR).isNotNull()
    carried = is_bad & (F.octet_length(sources.RAW) <= CARRIED_RAW_BYTES)
    counts = [
        F.count(F.lit(1)).alias("rows"),
        F.count_if(is_bad).alias("bad"),
        F.min_by(
            F.struct(sources.RAW, sources.SOURCE_FILE, sources.ERROR), F.when(carried, F.lit(0)), CARRIED_BAD_LINES
        ).alias("bad_lines"),
    ]
    if rereadable:
        counts.append(F.collect_set(F.when(is_bad, F.col(sources.LINE_BUCKET))).alias("bad_buckets"))
        counts.append(F.collect_set(F.when(is_bad, F.col(sources.SOURCE_FILE))).alias("bad_files"))
    return counts


class TableFailed(RuntimeError):
    def __init__(self, table_id: str, message: str, result: TableResult | None = None):
        super().__init__(f"table {table_id} failed: {message}")
        self.table_id, self.result = table_id, result


def checkpoint_query_id(checkpoint: Path) -> str:
    """The checkpoint's stable query id (Spark's `metadata` file), written by us first if the checkpoint is new."""
    metadata = checkpoint / "metadata"
    if metadata.exists():
        return json.loads(metadata.read_text().splitlines()[0])["id"]
    checkpoint.mkdir(parents=True, exist_ok=True)
    query_id = str(uuid.uuid4())
    tmp = checkpoint / ".metadata.tmp"
    tmp.write_text(json.dumps({"id": query_id}) + "\n")
    tmp.replace(metadata)
    return query_id


def inject_fault(table_id: str, point: str, batch_id: int | None = None) -> None:
    wanted = settings.FAULT.value().split(":")
    if len(wanted) >= 2 and wanted[0] == table_id and wanted[1] == point:
        if len(wanted) == 2 or batch_id is None or int(wanted[2]) == batch_id:
            os.kill(os.getpid(), signal.SIGKILL)


class BatchWriter:
    """foreachBatch target: idempotent Delta writes of one table (and its quarantine) per micro-batch."""

    def __init__(
        self,
        spark: SparkSession,
        table: Table,
        app_id: str,
        run: RunContext,
        result: TableResult,
        gate=None,
        pipeline: Pipeline | None = None,
        listener: ProgressListener | None = None,
    ):
        self.spark, self.table, self.app_id, self.run, self.result = spark, table, app_id, run, result
        self.listener = listener  # told a landing batch's true row count (Spark counts each of its two reads)
        self.path = str(paths.table_path(table.id))
        self.quarantine = str(paths.quarantine_path(table.id))
        self.gate = gate  # millpond.engine.quality.Gate for a table with an expectations suite
        self.pipeline = pipeline  # for a landing table: its source's schema_drift policy and spec path
        # Append tables take new columns from upstream (`schema_drift: add`, a field added to a source schema, a
        # `SELECT *` over an evolved table): Delta adds the column, older rows read null. Never a type change.
        self.merge_schema = table.output_mode == "append"

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.result.micro_batches += 1
        inject_fault(self.table.id, "before_write", batch_id)
        if self.table.sink.is_kafka:
            self.send_to_kafka(batch)
        elif self.gate is not None:
            self.write_gated_batch(batch, batch_id)
        elif self.table.reads_source:
            self.write_landing_batch(batch, batch_id)
        elif self.table.merges:
            self.write_merged(batch, batch_id)
        else:
            self.write_replayable(batch, batch_id, "overwrite" if self.table.output_mode == "complete" else "append")
        inject_fault(self.table.id, "after_write", batch_id)

    def write_replayable(self, batch: DataFrame, batch_id: int, mode: str) -> None:
        """Write, and if Delta skipped a batch it already holds (replay after a crash), still run the plan.

        Stateful operators commit their state stores only when the batch executes, and Spark 4.2 fails a batch
        whose state stores did not all commit: a skipped write must be followed by a `noop` execution.
        """
        if not self.write(batch, self.path, mode, batch_id):
            batch.write.format("noop").mode("overwrite").save()

    def write(self, df: DataFrame, path: str, mode: str, batch_id: int) -> bool:
        """Write the batch with Delta's idempotent write; False if Delta skipped it (a replay after a crash).

        Every commit carries Delta's `txn` action (app id = the checkpoint's query id, version = the batch id), and
        Delta itself skips a batch whose id the app already committed to the table: its transaction state lives in
        every checkpoint, so log cleanup never forgets it. A small complete-mode overwrite may be committed by
        delta-rs from the driver (millpond.lake.small_overwrite) with the same action: the batch is counted from a cache
        before anything reaches the driver, and Spark writes a larger one from the same cache.
        """
        table = None
        if mode == "overwrite" and DELTA_RS_COMMITS.enabled():
            table = small_overwrite.table_to_overwrite(Path(path), df.schema.jsonValue())
        if table is None:
            return self.spark_write(df, path, mode, batch_id)
        committed = table.transaction_version(self.app_id)  # Delta's transaction state, read by delta-rs
        if committed is not None and committed >= batch_id:
            return False  # Delta's rule: a batch id at or below the app's committed version is skipped
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if df.count() > small_overwrite.SMALL_ROWS:
                return self.spark_write(df, path, mode, batch_id)
            small_overwrite.overwrite(table, df.toArrow(), self.app_id, batch_id)
            return True
        finally:
            df.unpersist()

    def spark_write(self, df: DataFrame, path: str, mode: str, batch_id: int) -> bool:
        """delta-spark's write with `txnAppId`/`txnVersion`; whether it committed is read from the commits it may
        have made: one carrying this app's batch (another writer's commit, an OPTIMIZE say, can land meanwhile)."""
        before = delta_version(Path(path))
        (
            df.write.format("delta")
            .mode(mode)
            .option("mergeSchema", str(self.merge_schema and path == self.path).lower())
            .option("txnAppId", self.app_id)
            .option("txnVersion", batch_id)
            .save(path)
        )
        return committed_batch_in(Path(path), before, self.app_id, batch_id)

    def write_merged(self, batch: DataFrame, batch_id: int) -> None:
        """Update mode: MERGE the batch's changed aggregate rows into the table on its keys.

        The plan runs once into a local checkpoint first, so stateful operators commit their state stores even when
        Delta skips a replayed MERGE. MERGE needs a table: the first batch with rows creates it with the batch's schema,
        under the same app id and batch id, so a replay of that batch is skipped like any other.
        """
        # An eager local checkpoint, not persist(): Spark 4.2 cannot read back a cached aggregate that uses max_by
        # (count() fails with "key not found" on a group column in InMemoryRelation.withOutput).
        batch = batch.localCheckpoint(eager=True)
        if batch.count() == 0:  # a no-data batch that only advanced the watermark: nothing changed
            return
        if delta_version(Path(self.path)) < 0:
            self.write(batch, self.path, "append", batch_id)
        else:
            self.merge(batch, batch_id)

    def merge(self, batch: DataFrame, batch_id: int) -> None:
        """Upsert on the keys (null-safe: a null group is a group); Delta skips a batch id it already committed."""
        from delta.tables import DeltaTable

        session = batch.sparkSession  # the query's own session: the confs cannot leak into another table's writes
        condition = " AND ".join(f"t.`{key}` <=> s.`{key}`" for key in self.table.keys)
        session.conf.set(TXN_APP_ID, self.app_id)
        session.conf.set(TXN_VERSION, str(batch_id))
        try:
            (
                DeltaTable.forPath(session, self.path)
                .alias("t")
                .merge(batch.alias("s"), condition)
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )
        finally:
            session.conf.unset(TXN_APP_ID)
            session.conf.unset(TXN_VERSION)

    def send_to_kafka(self, batch: DataFrame) -> None:
        """Send the batch's rows to the sink's topic as (key, value) messages: at least once.

        The plan runs once into the cache (stateful operators commit their state, and the count is exact); a batch
        replayed after a crash between the send and Spark's commit log is sent again: Kafka cannot skip it.
        """
        sink = self.table.sink
        columns = ([F.expr(sink.key).alias("key")] if sink.key else []) + [F.expr(sink.value).alias("value")]
        batch = batch.select(*columns).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            rows = batch.count()
            if rows == 0:  # e.g. the batch that only advances a watermark
                return
            as_bytes = [
                F.col(f.name) if isinstance(f.dataType, BinaryType) else F.col(f.name).cast("string")
                for f in batch.schema.fields
            ]
            (
                batch.select(*as_bytes)
                .write.format("kafka")
                .option("kafka.bootstrap.servers", resolve_setting(sink.bootstrap_servers or ""))
                .option("topic", sink.topic)
                .options(**sink.options)
                .save()
            )
            self.result.rows_written += rows
        finally:
            batch.unpersist()

    def write_gated_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write-audit-publish: validate the batch, then write passing rows and set-aside rows, or nothing.

        A failed `fail` expectation raises before any write, so this batch id stays uncommitted in the checkpoint
        and the next run replays exactly these rows (the table and downstream stay as they were). Set-aside rows
        share the batch id with the table write, so a replay after a crash writes neither twice.
        """
        from millpond.engine.quality import GateFailed

        mode = "overwrite" if self.table.output_mode == "complete" else "append"
        # Persist and count first: the plan runs once over every partition (so stateful operators commit their
        # state stores even when Delta later skips a replayed write), and GX's many jobs read the cache.
        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if batch.count() == 0:  # e.g. the no-data batch a stateful query runs to advance its watermark
                if mode == "overwrite" or delta_version(Path(self.path)) < 0:  # an empty result; a table to create
                    self.write_replayable(batch, batch_id, mode)
                return  # count() ran the plan (state committed); an empty append would only add a table version
            report = self.gate.validate(batch, batch_id)
            if report.blocking:
                self.gate.publish(report)
                self.result.record_gate(report)
                raise GateFailed(report)
            good, bad = self.gate.split(batch, report)
            if bad is not None:
                bad = bad.persist(StorageLevel.MEMORY_AND_DISK)
                report.rows_dropped = bad.count()
            self.gate.publish(report)
            self.result.record_gate(report)
            self.write(good, self.path, mode, batch_id)
            if bad is not None:
                inject_fault(self.table.id, "between_writes", batch_id)
                self.write(bad, self.quarantine, "append", batch_id)
                bad.unpersist()
        finally:
            batch.unpersist()

    def write_landing_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Split parsed lines: well-formed rows to the table, the rest (raw text + reason) to its quarantine.

        One pass parses the files, writes the good rows and counts every row and the bad ones (`observe`). The
        same observation carries the bad lines themselves when they are few and short (CARRIED_BAD_LINES), which
        is what the quarantine then writes: what this pass read, with no second read. Only a batch with more or
        longer bad lines is read a second time. Of a json landing batch that second read takes only the files that
        held bad lines and parses only their lines whose hash bucket held one (`sources.reread_bad_lines`);
        re-filtering the batch frame would run its whole parse again, because foreachBatch hands over the executed
        micro-batch, where no filter reaches below the parse. Caching the parsed batch instead cost more than the
        parse itself (B3). A replayed batch whose table write Delta skips executes no plan, so it is counted by a
        query of its own.
        """
        now = datetime.now(UTC)
        ingested_at = F.lit(now).cast("timestamp")
        is_bad = F.col(sources.ERROR).isNotNull()
        rereadable = self.can_reread_bad_lines(batch)
        counts = landing_batch_metrics(rereadable)
        counted = None
        if not self.drift_needs_a_pass(batch):  # `add`/`fail` query the batch first; Observation fails after that
            counted = Observation(f"millpond-landing-{self.app_id}-{batch_id}-{uuid.uuid4().hex}")
        observed = batch.observe(counted, *counts) if counted else batch
        good = self.shape_for_drift(observed.where(~is_bad))  # fail: raises before writing
        # A Kafka message's address is in bronze's `_kafka_*` columns; `_source_file` holds it for the quarantine.
        dropped = (
            sources.RAW,
            sources.ERROR,
            sources.LINE_BUCKET,
            *((sources.SOURCE_FILE,) if self.table.reads_kafka else ()),
        )
        good_columns = [c for c in good.columns if c not in dropped]
        wrote = self.write(good.select(*good_columns, ingested_at.alias("_ingested_at")), self.path, "append", batch_id)
        if counted and wrote:
            metrics = counted.get
        else:  # the write was skipped (a replay after a crash), so the plan did not run: count separately
            metrics = batch.agg(*counts).first().asDict()
        rows, bad_rows = metrics["rows"], metrics["bad"]
        self.result.rows_in += rows
        if self.listener is not None:
            self.listener.rows_read[(self.table.id, batch_id)] = rows
        if bad_rows:
            carried = metrics["bad_lines"] or []
            if len(carried) == bad_rows:  # only carried lines are collected: all of them were
                if self.write_carried_bad_lines(carried, batch_id, now):
                    return
                bad = self.spark.createDataFrame(
                    carried,
                    batch.select(  # no delta-rs commit: Spark writes them
                        sources.RAW, sources.SOURCE_FILE, sources.ERROR
                    ).schema,
                )
            elif rereadable:
                bad = self.reread_bad_lines(metrics, bad_rows, batch_id)
            else:
                bad = batch.where(is_bad)
            bad = bad.select(
                F.col(sources.RAW).alias("raw"),
                F.col(sources.SOURCE_FILE).alias("source_file"),
                F.col(sources.ERROR).alias("reason"),
                F.lit("parse").alias("rule"),
                F.lit(self.run.run_id).alias("run_id"),
                ingested_at.alias("quarantined_at"),
            )
            inject_fault(self.table.id, "between_writes", batch_id)
            self.write(bad, self.quarantine, "append", batch_id)

    def write_carried_bad_lines(self, lines: list, batch_id: int, quarantined_at: datetime) -> bool:
        """Append the batch's carried bad lines to the quarantine by delta-rs from the driver, where they already
        are; False if Spark must write them: the speed-up is off (MILLPOND_DELTA_RS_COMMITS), or the quarantine does
        not exist yet (Spark creates it, with the session's default table properties) or is one delta-rs would not
        write exactly as Spark does. A cold Spark Delta write of the few rows cost 2.6 to 3.6 s of B3's 200-file
        batch. The commit carries Delta's `txn` action for the app and batch, as Spark's does, and a batch id the
        app already committed is skipped by Delta's rule, read from the table's transaction state."""
        path = Path(self.quarantine)
        table = system_tables.open_table(path) if DELTA_RS_COMMITS.enabled() else None
        if table is None or not system_tables.driver_writable(table):
            return False
        committed = table.transaction_version(self.app_id)
        if committed is not None and committed >= batch_id:
            return True
        rows = [
            {
                "raw": line[sources.RAW],
                "source_file": line[sources.SOURCE_FILE],
                "reason": line[sources.ERROR],
                "rule": "parse",
                "run_id": self.run.run_id,
                "quarantined_at": quarantined_at,
            }
            for line in lines
        ]
        inject_fault(self.table.id, "between_writes", batch_id)
        system_tables.append(path, LANDING_QUARANTINE_COLUMNS, rows, self.app_id, batch_id, table)
        return True

    def reread_bad_lines(self, metrics: dict, bad_rows: int, batch_id: int) -> DataFrame:
        """The batch's bad lines from their files, materialised, and checked against the count of the first read.

        A landing file that changed or vanished in between would otherwise put other lines in the quarantine than
        the ones missing from the table; this way the batch fails before writing them, naming the files.
        """
        files = metrics["bad_files"]
        source = self.pipeline.sources[self.table.source]
        bad = sources.reread_bad_lines(self.spark, source, files, metrics["bad_buckets"]).localCheckpoint(eager=True)
        found = bad.count()
        if found != bad_rows:
            shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            self.result.error = (
                f"{self.table.id}: batch {batch_id} read {bad_rows} malformed line(s) from {shown}, but reading "
                f"those files again for the quarantine found {found}: a landing file changed or was removed while "
                "this run read it. The table holds the batch's well-formed rows; its quarantine was not written. "
                "Fix: land files once and never rewrite them (write under a name starting with '.' or '_', then "
                "rename); put the files back as they were, then rerun to write the quarantine"
            )
            raise RuntimeError(self.result.error)
        return bad

    def can_reread_bad_lines(self, batch: DataFrame) -> bool:
        """Whether the quarantine pass can read the bad lines again from their files: a json landing source, and
        no transform that could filter the batch (its quarantine then comes from the batch itself)."""
        return (
            self.table.reads_landing
            and self.pipeline is not None
            and not self.table.transform
            and sources.LINE_BUCKET in batch.columns
        )

    def drift_needs_a_pass(self, batch: DataFrame) -> bool:
        """Whether `shape_for_drift` must look at the batch's new fields (policies `add` and `fail`)."""
        if self.pipeline is None or sources.NEW_FIELDS not in batch.columns:
            return False
        return self.pipeline.sources[self.table.source].schema_drift != "rescue"

    def shape_for_drift(self, good: DataFrame) -> DataFrame:
        """Apply the json source's `schema_drift` policy to the batch's well-formed rows (see sources.py)."""
        if self.pipeline is None or sources.NEW_FIELDS not in good.columns:
            return good
        source = self.pipeline.sources[self.table.source]
        existing = []
        if delta_version(Path(self.path)) >= 0:
            existing = self.spark.read.format("delta").load(self.path).columns
        try:
            return sources.apply_schema_drift(good, source, str(self.pipeline.spec_path), existing)
        except sources.SchemaDriftFailed as exc:
            self.result.error = str(exc)  # run_table reports it: Spark's wrapper would bury it in a traceback
            raise


def start_query(
    spark: SparkSession,
    pipeline: Pipeline,
    table: Table,
    run: RunContext,
    result: TableResult,
    listener: ProgressListener,
):
    checkpoint = paths.checkpoint_path(pipeline.name, table.id)
    app_id = f"millpond:{checkpoint_query_id(checkpoint)}"
    df = plan_table(
        sources.read_table_source(spark, pipeline, table),
        table,
        sources.read_join_source(spark, table),
        sources.read_dimension(spark, pipeline, table),
    )
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
        writer = writer.foreachBatch(
            BatchWriter(spark, table, app_id, run, result, gate_for(spark, pipeline, table, run), pipeline, listener)
        )
    if table.trigger.kind == "availableNow":
        writer = writer.trigger(availableNow=True)
    elif table.trigger.kind == "once":
        writer = writer.trigger(once=True)
    else:
        writer = writer.trigger(processingTime=table.trigger.interval)
    return writer.start()


def gate_for(spark: SparkSession, pipeline: Pipeline, table: Table, run: RunContext):
    """The table's data-quality gate, or None when it has no expectations suite (GX is imported only then)."""
    if not table.expectations:
        return None
    if table.reads_source:
        raise ValueError(
            f"{table.id}: a table reading landing files or Kafka cannot be gated (gate the table reading it)"
        )
    from millpond.engine.quality import Gate

    return Gate(spark, pipeline.name, table, run.run_id, quarantine_failures=table.id in run.quarantine_failures)


def run_table(
    spark: SparkSession,
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
        checkpoints.verify(pipeline, table)
        fingerprint = checkpoints.input_fingerprint(pipeline, table)
        previous = checkpoints.nothing_new(pipeline, table, fingerprint)
        if previous is not None:  # the query would find nothing: skip its start (seconds per table, B5)
            result.input_unchanged, result.state_rows = True, int(previous.get("state_rows", 0))
        else:
            query = start_query(spark, pipeline, table, run, result, listener)
            if table.trigger.kind == "processingTime":
                query.processAllAvailable()  # a scheduled run drains what is there, then yields the slot
                query.stop()
            query.awaitTermination()
            inject_fault(table.id, "after_query")  # every batch committed; millpond's own records not yet
            collect_progress(listener.progress_of(query), table, result)
            checkpoints.record_shape(pipeline, table)
            checkpoints.record_input(pipeline, table, fingerprint, result.state_rows)
    except CapturedException as exc:
        error = result.error or _first_line(exc)  # a message the batch writer left (schema drift) beats Spark's
        hint = storage_error_fix(str(exc)) or checkpoints.spark_error_fix(pipeline, table, str(exc))
        error = f"{error} -- {hint}" if hint else error
    except (checkpoints.CheckpointProblem, sources.DimensionProblem) as exc:
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
    if error:
        raise TableFailed(table.id, error, result)
    inject_fault(table.id, "after_table")
    return result


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


def collect_progress(progresses: list, table: Table, result: TableResult) -> None:
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
                f"storage error writing the lake {settings.lake_root()}: {what}, then rerun; the failed batch was "
                "not committed, readers still see the previous table version, and the rerun writes it once"
            )
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:2000] if text else type(exc).__name__
