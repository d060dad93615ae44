"""Update mode: each batch's changed aggregate rows MERGEd into the table on its keys."""

from __future__ import annotations

import uuid

from pyspark.sql import DataFrame

from millpond.driver.run_guard import check_writer
from millpond.driver.sinks.delta import DeltaSink
from millpond.lake.delta_log import latest_version as delta_version

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"  # Delta's idempotent-DML session confs (MERGE included)
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


class MergeSink(DeltaSink):
    """An update-mode aggregate or stateful function: a MERGE per batch, under the same `txn` as every write."""

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """MERGE the batch's changed aggregate rows into the table on its keys.

        The plan runs once into a local checkpoint first, so stateful operators commit their state stores even when
        Delta skips a replayed MERGE. MERGE needs a table: the first batch with rows creates it with the batch's schema,
        under the same app id and batch id, so a replay of that batch is skipped like any other.
        """
        # An eager local checkpoint, not persist(): Spark 4.2 cannot read back a cached aggregate that uses max_by
        # (count() fails with "key not found" on a group column in InMemoryRelation.withOutput).
        batch = batch.localCheckpoint(eager=True)
        if batch.count() == 0:  # a no-data batch that only advanced the watermark: nothing changed
            return
        if delta_version(self.path) < 0:
            self.write(batch, self.path, "append", batch_id)
        else:
            self.merge(batch, batch_id)

    def merge(self, batch: DataFrame, batch_id: int) -> None:
        """Upsert on the keys (null-safe: a null group is a group); Delta skips a batch id it already committed."""
        condition = " AND ".join(f"t.`{key}` <=> s.`{key}`" for key in self.table.keys)
        merge_into(
            self.path,
            batch,
            f"{condition} WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
            self.app_id,
            batch_id,
        )


def merge_into(path: str, source: DataFrame, clauses: str, app_id: str, batch_id: int) -> None:
    """`MERGE INTO <path> t USING <source> s ON <clauses>` under Delta's `txn` (app id, batch id): Delta skips a
    batch the app already committed to the table.

    SQL `MERGE INTO`, not `DeltaTable.merge`: the same statement runs on Spark Connect (the engine), where the
    DeltaTable API needs Delta's Connect plugin. The confs are set on the source's own session (the query's), so they
    cannot leak into another table's writes."""
    session = source.sparkSession
    view = f"millpond_merge_{uuid.uuid4().hex}"
    target = "delta.`" + path.replace("`", "``") + "`"
    source.createOrReplaceTempView(view)
    session.conf.set(TXN_APP_ID, app_id)
    session.conf.set(TXN_VERSION, str(batch_id))
    try:
        check_writer()
        session.sql(f"MERGE INTO {target} t USING {view} s ON {clauses}").collect()
    finally:
        session.conf.unset(TXN_APP_ID)
        session.conf.unset(TXN_VERSION)
        session.catalog.dropTempView(view)
