"""A Kafka-sink table (`sink: {format: kafka}`): each batch sent to a topic from foreachBatch, at least once.

A topic has nothing like a Delta commit to name and skip a batch replayed after a crash, so that batch is sent again.
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from millpond.driver.run_guard import check_writer
from millpond.driver.sinks.base import BatchSink
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import Table, resolve_setting


class KafkaSink(BatchSink):
    def __init__(self, spark: SparkSession, table: Table, app_id: str, run: RunContext, result: TableResult):
        super().__init__(spark, table, app_id, run, result)
        # `${NAME}` resolved here, in the run's environment: on the engine the batches run in the server's.
        self.bootstrap_servers = resolve_setting(table.sink.bootstrap_servers or "")

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
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
            check_writer()
            (
                batch.select(*as_bytes)
                .write.format("kafka")
                .option("kafka.bootstrap.servers", self.bootstrap_servers)
                .option("topic", sink.topic)
                .options(**sink.options)
                .save()
            )
            self.result.rows_written += rows
        finally:
            batch.unpersist()
