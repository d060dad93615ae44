"""A table with an expectations suite: write-audit-publish per batch (millpond.driver.quality is the gate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from millpond.driver.faults import inject_fault
from millpond.driver.sinks.delta import DeltaSink
from millpond.lake.delta_log import latest_version as delta_version
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import Table

if TYPE_CHECKING:
    from millpond.driver.quality import Gate

# Imported inside functions: the gate (and Great Expectations behind it) only when a gated batch is written.


class GatedSink(DeltaSink):
    """Appends or overwrites (the table's output mode) only the rows the gate passes; its set-aside rows go to the
    quarantine under the same batch id."""

    def __init__(
        self, spark: SparkSession, table: Table, app_id: str, run: RunContext, result: TableResult, gate: Gate
    ):
        super().__init__(spark, table, app_id, run, result)
        self.gate = gate
        self.mode = "overwrite" if table.output_mode == "complete" else "append"

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write-audit-publish: validate the batch, then write passing rows and set-aside rows, or nothing.

        A failed `fail` expectation raises before any write, so this batch id stays uncommitted in the checkpoint
        and the next run replays exactly these rows (the table and downstream stay as they were). Set-aside rows
        share the batch id with the table write, so a replay after a crash writes neither twice.
        """
        from millpond.driver.quality import GateFailed

        # Persist and count first: the plan runs once over every partition (so stateful operators commit their
        # state stores even when Delta later skips a replayed write), and GX's many jobs read the cache.
        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if batch.count() == 0:  # e.g. the no-data batch a stateful query runs to advance its watermark
                if self.mode == "overwrite" or delta_version(self.path) < 0:  # an empty result; a table to create
                    self.write_replayable(batch, batch_id, self.mode)
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
            self.write(good, self.path, self.mode, batch_id)
            if bad is not None:
                inject_fault(self.table.id, "between_writes", batch_id)
                self.write(bad, self.quarantine, "append", batch_id)
                bad.unpersist()
        finally:
            batch.unpersist()
