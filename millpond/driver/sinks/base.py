"""What every foreachBatch sink does around its own write: count the batch, and stop at the fault points."""

from __future__ import annotations

from abc import ABC, abstractmethod

from pyspark.sql import DataFrame, SparkSession

from millpond.driver.faults import inject_fault
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import Table


class BatchSink(ABC):
    """The foreachBatch target of one table's query: one subclass per write strategy, chosen once per table.

    `app_id` is Delta's transaction app id for the table's writes (`millpond:<checkpoint query id>`); each commit a
    sink makes carries it with the batch id as the version, so Delta skips a batch replayed after a crash.
    """

    def __init__(self, spark: SparkSession, table: Table, app_id: str, run: RunContext, result: TableResult):
        self.spark, self.table, self.app_id, self.run, self.result = spark, table, app_id, run, result

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.result.micro_batches += 1
        inject_fault(self.table.id, "before_write", batch_id)
        self.write_batch(batch, batch_id)
        inject_fault(self.table.id, "after_write", batch_id)

    @abstractmethod
    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write one micro-batch exactly as this strategy does; a replayed batch id must not be written twice."""
