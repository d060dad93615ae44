"""Overwrite a small Delta table from the driver, by delta-rs: how complete-mode (gold) results are written.

A complete-mode table is rewritten whole every batch. delta-spark answers an overwrite by rebuilding the table's
state in Spark jobs to list the files it removes: 1.2 to 1.7 s per write for the 12-row gold.device_counts on a
quiet machine. delta-rs reads the same log in Rust: 0.06 s against delta-spark's 2.45 s per overwrite of the
651-row gold.activity_hourly, alternating in one JVM (by hand; docs "Benchmarks"). The commit is an ordinary Delta
commit with Delta's `txn` action for the app and batch: Spark reads it, DESCRIBE HISTORY shows it, and delta-spark
skips that batch id on a replay.

Only a table that delta-rs writes exactly as Spark would takes this path: one that exists, with no table features
beyond writer version 2, no partitions, only the properties in system_tables.EXACT_PROPERTIES, not append-only, and
the batch's schema (names and types); and only a batch of at most SMALL_ROWS rows, counted before it is collected
(`DeltaSink.write` in millpond.driver.sinks.delta). Anything else, and the first write, which creates the table,
goes through Spark.
MILLPOND_DELTA_RS_COMMITS=off sends every overwrite through Spark.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from millpond.lake import lease
from millpond.lake.paths import LakePath
from millpond.lake.system_tables import checkpoint_as_spark_does, driver_writable, open_table

if TYPE_CHECKING:  # annotations only: delta-rs and Arrow load when a table is written, not at import
    import pyarrow as pa
    from deltalake import DeltaTable

# Imported inside functions: deltalake and pyarrow only when a small table is overwritten.

SMALL_ROWS = 100_000  # the most rows of a batch collected to the driver as Arrow: a few MB for an aggregate


def table_to_overwrite(path: LakePath | str, spark_schema: dict[str, Any]) -> DeltaTable | None:
    """The table's delta-rs handle if this batch (Spark schema as `StructType.jsonValue()`) can take this path."""
    table = open_table(path)
    if table is None or not driver_writable(table):
        return None
    if table.metadata().configuration.get("delta.appendOnly", "false").lower() == "true":
        return None
    if _shape(json.loads(table.schema().to_json())) != _shape(spark_schema):
        return None
    return table


def _shape(schema: dict[str, Any]) -> Any:
    """Names and types, nested, without nullability or field metadata (Spark writes every Delta column nullable)."""
    if isinstance(schema, dict):
        return {
            k: _shape(v)
            for k, v in schema.items()
            if k not in ("nullable", "metadata", "containsNull", "valueContainsNull")
        }
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def overwrite(table: DeltaTable, data: pa.Table, app_id: str, batch_id: int) -> None:
    """Replace the table's rows with `data` (Arrow) in one commit that names the app and batch."""
    import pyarrow as pa
    from deltalake import CommitProperties, PostCommitHookProperties, Transaction, write_deltalake

    rows = pa.table(data).cast(pa.schema(table.schema().to_arrow()))  # e.g. Spark's large_string -> string
    lease.fence()
    write_deltalake(
        table,
        rows,
        mode="overwrite",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
        post_commithook_properties=PostCommitHookProperties(create_checkpoint=False),
    )  # delta-rs's interval is 100
    checkpoint_as_spark_does(table)
