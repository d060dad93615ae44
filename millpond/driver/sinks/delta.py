"""Delta's idempotent write, shared by every sink writing a Delta table, and the two plain strategies using it.

Each commit of a table or its quarantine (append, overwrite, first write or later) carries Delta's `txn` action
(`txnAppId` = the checkpoint's query id, `txnVersion` = the batch id), and Delta skips a batch replayed after a
crash (offsets logged, commit not yet) whose id the app already committed. Whether a write committed is read from
the table's log (millpond.lake.delta_log.committed_batch_in), never assumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from millpond.driver.run_guard import check_writer
from millpond.driver.sinks.base import BatchSink
from millpond.driver.speedups import DELTA_RS_COMMITS
from millpond.lake import paths, small_overwrite
from millpond.lake.delta_log import committed_batch_in
from millpond.lake.delta_log import latest_version as delta_version
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import Table

if TYPE_CHECKING:
    from deltalake import DeltaTable


class DeltaSink(BatchSink):
    """A sink writing the table's Delta table (and maybe its quarantine) with Delta's idempotent write."""

    def __init__(self, spark: SparkSession, table: Table, app_id: str, run: RunContext, result: TableResult):
        super().__init__(spark, table, app_id, run, result)
        self.path = str(paths.table_path(table.id))
        self.quarantine = str(paths.quarantine_path(table.id))
        # Append tables take new columns from upstream (`schema_drift: add`, a field added to a source schema, a
        # `SELECT *` over an evolved table): Delta adds the column, older rows read null. Never a type change.
        self.merge_schema = table.output_mode == "append"

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
        delta-rs from the driver (millpond.lake.small_overwrite) with the same action: the batch is counted from a
        cache before anything reaches the driver, and Spark writes a larger one from the same cache.
        """
        table = None
        if mode == "overwrite" and DELTA_RS_COMMITS.enabled():
            table = small_overwrite.table_to_overwrite(path, df.schema.jsonValue())
        if table is None:
            return self.spark_write(df, path, mode, batch_id)
        return self.delta_rs_overwrite(table, df, path, batch_id)

    def delta_rs_overwrite(self, table: DeltaTable, df: DataFrame, path: str, batch_id: int) -> bool:
        """delta-rs's overwrite from the driver when the batch is small, else Spark's (see write)."""
        committed = table.transaction_version(self.app_id)  # Delta's transaction state, read by delta-rs
        if committed is not None and committed >= batch_id:
            return False  # Delta's rule: a batch id at or below the app's committed version is skipped
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if df.count() > small_overwrite.SMALL_ROWS:
                return self.spark_write(df, path, "overwrite", batch_id)
            data = df.toArrow()
            check_writer()
            small_overwrite.overwrite(table, data, self.app_id, batch_id)
            return True
        finally:
            df.unpersist()

    def spark_write(self, df: DataFrame, path: str, mode: str, batch_id: int) -> bool:
        """delta-spark's write with `txnAppId`/`txnVersion`; whether it committed is read from the commits it may
        have made: one carrying this app's batch (another writer's commit, an OPTIMIZE say, can land meanwhile)."""
        before = delta_version(path)
        check_writer()
        (
            df.write.format("delta")
            .mode(mode)
            .option("mergeSchema", str(self.merge_schema and path == self.path).lower())
            .option("txnAppId", self.app_id)
            .option("txnVersion", batch_id)
            .save(path)
        )
        return committed_batch_in(path, before, self.app_id, batch_id)


class AppendSink(DeltaSink):
    """Append mode (and update mode without an aggregate, which emits what append does): each batch appended."""

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        self.write_replayable(batch, batch_id, "append")


class CompleteOverwriteSink(DeltaSink):
    """Complete mode: each batch is the whole result and replaces the table (a small one by delta-rs, see write)."""

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        self.write_replayable(batch, batch_id, "overwrite")
