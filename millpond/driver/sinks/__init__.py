"""Where a table's micro-batches go: one foreachBatch sink class per write strategy, chosen once per table.

    AppendSink             append (and update without an aggregate): each batch appended to the Delta table
    CompleteOverwriteSink  complete: each batch replaces the table (a small one committed by delta-rs)
    MergeSink              update with an aggregate or stateful function: each batch MERGEd on the keys
    ChangeFeedSink         `cdc:`: each batch of change events applied as SCD type 1 or 2 (three MERGEs, see cdc.py)
    GatedSink              a table with an expectations suite: write-audit-publish, set-aside rows quarantined
    LandingSink            bronze, reading landing files or Kafka: good records to the table, bad ones quarantined
    KafkaSink              `sink: {format: kafka}`: each batch sent to a topic, at least once

Every Delta commit a sink makes, of a table or its quarantine (append, overwrite, MERGE, first write or later,
delta-spark or delta-rs), carries Delta's `txn` action (`txnAppId` = `millpond:<checkpoint query id>`,
`txnVersion` = the batch id), and Delta skips a batch replayed after a crash (offsets logged, commit not yet) whose
id the app already committed. The app id is the checkpoint's query id: a new checkpoint never inherits an old one's
transaction history. A file-sink table has no sink here: Spark's own file sink writes it (millpond.driver.streaming).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from millpond.driver.progress import ProgressListener
from millpond.driver.sinks.base import BatchSink
from millpond.driver.sinks.cdc import ChangeFeedSink
from millpond.driver.sinks.delta import AppendSink, CompleteOverwriteSink
from millpond.driver.sinks.gated import GatedSink
from millpond.driver.sinks.kafka import KafkaSink
from millpond.driver.sinks.landing import LandingSink
from millpond.driver.sinks.merge import MergeSink
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import Pipeline, Table

if TYPE_CHECKING:
    from millpond.driver.quality import Gate

# Imported inside functions: the gate (and Great Expectations behind it) only for a gated table.

__all__ = [
    "AppendSink",
    "BatchSink",
    "ChangeFeedSink",
    "CompleteOverwriteSink",
    "GatedSink",
    "KafkaSink",
    "LandingSink",
    "MergeSink",
    "gate_for",
    "sink_for",
]


def sink_for(
    spark: SparkSession,
    pipeline: Pipeline,
    table: Table,
    app_id: str,
    run: RunContext,
    result: TableResult,
    listener: ProgressListener,
) -> BatchSink:
    """The table's foreachBatch sink (the spec loader has rejected the combinations not listed in this module)."""
    gate = gate_for(spark, pipeline, table, run)
    if table.sink.is_kafka:
        return KafkaSink(spark, table, app_id, run, result)
    if gate is not None:
        return GatedSink(spark, table, app_id, run, result, gate)
    if table.reads_source:
        return LandingSink(spark, table, app_id, run, result, pipeline, listener)
    if table.cdc:
        return ChangeFeedSink(spark, table, app_id, run, result)
    if table.merges:
        return MergeSink(spark, table, app_id, run, result)
    if table.output_mode == "complete":
        return CompleteOverwriteSink(spark, table, app_id, run, result)
    return AppendSink(spark, table, app_id, run, result)


def gate_for(spark: SparkSession, pipeline: Pipeline, table: Table, run: RunContext) -> Gate | None:
    """The table's data-quality gate, or None when it has no expectations suite (GX is imported only then)."""
    if not table.expectations:
        return None
    if table.reads_source:
        raise ValueError(
            f"{table.id}: a table reading landing files or Kafka cannot be gated (gate the table reading it)"
        )
    from millpond.driver.quality import Gate

    return Gate(
        spark,
        pipeline.name,
        table,
        run.run_id,
        quarantine_failures=table.id in run.quarantine_failures,
        backlog=run.backlog.get(table.id),
    )
