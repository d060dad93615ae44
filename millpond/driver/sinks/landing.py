"""A bronze table reading landing files or Kafka: parsed records to the table, malformed ones to its quarantine."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, Row, SparkSession
from pyspark.sql import functions as F

from millpond.driver import sources
from millpond.driver.faults import inject_fault
from millpond.driver.progress import ProgressListener
from millpond.driver.run_guard import check_writer
from millpond.driver.sinks.delta import DeltaSink
from millpond.driver.speedups import DELTA_RS_COMMITS
from millpond.lake import system_tables
from millpond.lake.delta_log import latest_version as delta_version
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import DeltaSource, FileSource, KafkaSource, Pipeline, Table
from millpond.spec.model import INGESTED_AT_COLUMN

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


class LandingSink(DeltaSink):
    """Appends a source batch's well-formed records and quarantines the rest, both under the batch's `txn`."""

    def __init__(
        self,
        spark: SparkSession,
        table: Table,
        app_id: str,
        run: RunContext,
        result: TableResult,
        pipeline: Pipeline,
        listener: ProgressListener,
    ):
        super().__init__(spark, table, app_id, run, result)
        self.pipeline = pipeline  # the source's schema_drift policy and the spec's path
        self.listener = listener  # told the batch's true row count (Spark counts each of its two reads)

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
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
        wrote = self.write(
            good.select(*good_columns, ingested_at.alias(INGESTED_AT_COLUMN)), self.path, "append", batch_id
        )
        if counted and wrote:
            metrics = counted.get
        else:  # the write was skipped (a replay after a crash), so the plan did not run: count separately
            row = batch.agg(*counts).first()
            assert row is not None  # a global aggregate has one row
            metrics = row.asDict()
        rows, bad_rows = metrics["rows"], metrics["bad"]
        self.result.rows_in += rows
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

    def write_carried_bad_lines(self, lines: list[Row], batch_id: int, quarantined_at: datetime) -> bool:
        """Append the batch's carried bad lines to the quarantine by delta-rs from the driver, where they already
        are; False if Spark must write them: the speed-up is off (MILLPOND_DELTA_RS_COMMITS), or the quarantine does
        not exist yet (Spark creates it, with the session's default table properties) or is one delta-rs would not
        write exactly as Spark does. A cold Spark Delta write of the few rows cost 2.6 to 3.6 s of B3's 200-file
        batch. The commit carries Delta's `txn` action for the app and batch, as Spark's does, and a batch id the
        app already committed is skipped by Delta's rule, read from the table's transaction state."""
        path = self.quarantine
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
        check_writer()
        system_tables.append(path, LANDING_QUARANTINE_COLUMNS, rows, self.app_id, batch_id, table)
        return True

    def reread_bad_lines(self, metrics: dict[str, Any], bad_rows: int, batch_id: int) -> DataFrame:
        """The batch's bad lines from their files, materialised, and checked against the count of the first read.

        A landing file that changed or vanished in between would otherwise put other lines in the quarantine than
        the ones missing from the table; this way the batch fails before writing them, naming the files.
        """
        files = metrics["bad_files"]
        source = self.pipeline.sources[self.table.source]
        assert isinstance(source, FileSource)  # can_reread_bad_lines: a landing source
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
        return self.table.reads_landing and not self.table.transform and sources.LINE_BUCKET in batch.columns

    @property
    def ingested(self) -> FileSource | KafkaSource:
        """The landing folder or Kafka topics this table parses (a Delta source is never ingested this way)."""
        source = self.pipeline.sources[self.table.source]
        assert not isinstance(source, DeltaSource)  # the spec loader: only a change-feed CDC table reads one
        return source

    def drift_needs_a_pass(self, batch: DataFrame) -> bool:
        """Whether `shape_for_drift` must look at the batch's new fields (policies `add` and `fail`)."""
        if sources.NEW_FIELDS not in batch.columns:
            return False
        return self.ingested.schema_drift != "rescue"

    def shape_for_drift(self, good: DataFrame) -> DataFrame:
        """Apply the json source's `schema_drift` policy to the batch's well-formed rows (see sources.py)."""
        if sources.NEW_FIELDS not in good.columns:
            return good
        source = self.ingested
        existing = []
        if delta_version(self.path) >= 0:
            existing = self.spark.read.format("delta").load(self.path).columns
        try:
            return sources.apply_schema_drift(good, source, str(self.pipeline.spec_path), existing)
        except sources.SchemaDriftFailed as exc:
            self.result.error = str(exc)  # run_table reports it: Spark's wrapper would bury it in a traceback
            raise
