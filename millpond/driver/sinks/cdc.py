"""A table applying a change feed (`cdc:`): SCD type 1 or 2, the newest event by `sequence_by` winning whatever the
arrival order (docs/cdc.md).

Each batch makes up to three Delta commits, each under the batch's `txn` (app id, batch id), so Delta skips any of
them a replay after a crash finds committed:

    1. the quarantine   rows that cannot be applied: a null key or sequence, or two different events of one key at
                        one sequence (which of them is newest is undefined)
    2. the change store every distinct event (SCD 2), or each key's newest one with deletes kept as tombstones
                        (SCD 1): millpond.lake.paths.changes_path
    3. the table        the rows of the batch's keys, recomputed from the store and MERGEd in

The table is a function of the store alone, and the store is written first: a replay that finds the store committed
and the table not recomputes the same rows from the same store. Tombstones and the history are never forgotten, so an
event arriving late, however late, changes exactly what it would have changed had it arrived in order.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from millpond.driver.faults import inject_fault
from millpond.driver.run_guard import check_writer
from millpond.driver.sinks.delta import DeltaSink
from millpond.driver.sinks.merge import merge_into
from millpond.lake import paths
from millpond.lake.delta_log import latest_version as delta_version
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import CDC_DELETED as DELETED
from millpond.spec import CDC_SEQUENCE as SEQUENCE
from millpond.spec import CHANGE_FEED_COLUMNS, CHANGE_TYPE, COMMIT_VERSION, END_AT, START_AT, Cdc, Table

_VERSION, _ACTION = "__version", "__action"
_ADDS, _ROWS = "__millpond_adds", "__millpond_rows"  # net_changes' own columns, beside the feed's


def events_of(batch: DataFrame, cdc: Cdc) -> DataFrame:
    """The batch's rows as events: the kept columns, their sequence (a struct for several columns: compared
    column by column) and whether each is a delete (a predicate that is null on a row does not delete)."""
    left_out = {c.lower() for c in cdc.except_columns}  # Spark's names are case-insensitive
    kept = list(cdc.columns) or [c for c in batch.columns if c.lower() not in left_out]
    deleted = F.coalesce(F.expr(cdc.apply_as_deletes), F.lit(False)) if cdc.apply_as_deletes else F.lit(False)
    if cdc.change_feed:  # a row Delta's feed deletes (net_changes) is a delete, whatever else the predicate says
        deleted = deleted | (F.col(CHANGE_TYPE) == "delete")
    sequence = _col(cdc.sequence_by[0]) if len(cdc.sequence_by) == 1 else F.struct(*map(_col, cdc.sequence_by))
    return batch.select(*map(_col, kept), sequence.alias(SEQUENCE), deleted.alias(DELETED))


def net_changes(batch: DataFrame, cdc: Cdc) -> DataFrame:
    """A Delta change data feed's rows as what each commit left of each key: its new row (an `insert` or
    `update_postimage`), or one `delete` where the commit only removed the key's rows (a `delete`, or an update's
    old row, `update_preimage`, whose key values the update changed). An update that keeps its key leaves only its
    new row; an overwrite (every old row deleted, every new one inserted) leaves each surviving key's new row. Rows
    with a null key are left as they are, for the quarantine.

    A commit is never split between batches (millpond.driver.sources.read_delta_stream). Where a commit removed
    several rows of one key, its delete keeps only the key and Delta's columns (the others null), so every replay
    makes the same event. Such a delete is a delete whatever `apply_as_deletes` says (events_of)."""
    keyed = F.lit(True)
    for key in cdc.keys:
        keyed = keyed & _col(key).isNotNull()
    adds = F.col(CHANGE_TYPE).isin("insert", "update_postimage")
    by_commit = Window.partitionBy(_col(COMMIT_VERSION), *map(_col, cdc.keys))
    marked = batch.where(keyed).withColumns(
        {_ADDS: F.max(adds.cast("int")).over(by_commit), _ROWS: F.count(F.lit(1)).over(by_commit)}
    )
    identity = {c.lower() for c in (*cdc.keys, *CHANGE_FEED_COLUMNS)}
    removed = marked.where(f"{_ADDS} = 0").select(
        *(
            _col(c)
            if c.lower() in identity
            else F.when(F.col(_ROWS) > 1, F.lit(None).cast(batch.schema[c].dataType)).otherwise(_col(c)).alias(c)
            for c in batch.columns
        )
    )
    deletes = (
        removed.withColumn(_ROWS, F.row_number().over(by_commit.orderBy(_col(COMMIT_VERSION))))  # alike: any one
        .where(f"{_ROWS} = 1")
        .drop(_ROWS)
        .withColumn(CHANGE_TYPE, F.lit("delete"))
    )
    unkeyed = batch.where(~keyed)  # each quarantined as it is (ChangeFeedSink.write_batch: unusable)
    return marked.where(adds).drop(_ADDS, _ROWS).unionByName(deletes).unionByName(unkeyed)


def value_columns(events: DataFrame, cdc: Cdc) -> list[str]:
    keys = {k.lower() for k in cdc.keys}
    return [c for c in events.columns if c.lower() not in keys and c not in (SEQUENCE, DELETED)]


def unusable(batch: DataFrame, cdc: Cdc) -> Column:
    """Why an upstream row cannot be applied, or null: a key or sequence column that is null."""
    checks = [(c, "a key column") for c in cdc.keys] + [(c, "a sequence_by column") for c in cdc.sequence_by]
    reasons = [F.when(_col(c).isNull(), F.lit(f"{what}, {c}, is null")) for c, what in checks]
    return F.coalesce(*reasons)


def newest_per_key(events: DataFrame, cdc: Cdc) -> DataFrame:
    """SCD 1: each key's newest event (sequences are unique per key once conflicts are set aside)."""
    order = Window.partitionBy(*map(_col, cdc.keys)).orderBy(F.col(SEQUENCE).desc())
    return events.withColumn("__rank", F.row_number().over(order)).where("__rank = 1").drop("__rank")


def scd2_versions(events: DataFrame, cdc: Cdc) -> DataFrame:
    """SCD 2: every key's versions from all its events. In sequence order, an upsert opens a version when it follows
    no event, a delete, or an upsert whose tracked columns differ; otherwise it updates the open version in place. A
    version ends where the next one starts or at the first delete after it (which closes it); `__END_AT` is null on
    the open version, and deletes with no version open change nothing."""
    keys = [_col(c) for c in cdc.keys]
    values = value_columns(events, cdc)
    sequence = {c.lower() for c in cdc.sequence_by}
    tracked = list(cdc.track_history_columns) or [c for c in values if c.lower() not in sequence]
    in_order = Window.partitionBy(*keys).orderBy(SEQUENCE)
    tracked_values = F.struct(*map(_col, tracked)) if tracked else F.lit(True)
    previous_deleted = F.lag(DELETED).over(in_order)
    opens = ~F.col(DELETED) & (
        previous_deleted.isNull() | previous_deleted | ~tracked_values.eqNullSafe(F.lag(tracked_values).over(in_order))
    )
    numbered = events.withColumn(
        _VERSION,
        F.sum(opens.cast("int")).over(in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)),
    ).where(F.col(_VERSION) > 0)
    upserts = numbered.where(~F.col(DELETED)).groupBy(*keys, _VERSION)
    versions = upserts.agg(
        F.min(SEQUENCE).alias(START_AT), F.max_by(F.struct(*map(_col, values)), F.col(SEQUENCE)).alias("__values")
    )
    closes = numbered.where(F.col(DELETED)).groupBy(*keys, _VERSION).agg(F.min(SEQUENCE).alias("__closed_at"))
    joined = versions.join(closes, [*cdc.keys, _VERSION], "left")
    end = F.coalesce(F.col("__closed_at"), F.lead(START_AT).over(Window.partitionBy(*keys).orderBy(_VERSION)))
    return joined.select(*keys, *[F.col("__values")[c].alias(c) for c in values], START_AT, end.alias(END_AT))


class ChangeFeedSink(DeltaSink):
    """Applies each batch of change events to an SCD 1 or SCD 2 table (see the module's docstring)."""

    def __init__(self, spark: SparkSession, table: Table, app_id: str, run: RunContext, result: TableResult):
        super().__init__(spark, table, app_id, run, result)
        assert table.cdc is not None
        self.cdc: Cdc = table.cdc
        self.changes = str(paths.changes_path(self.table.id))

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.localCheckpoint(eager=True)  # read once: the batch is split, checked and joined below
        if batch.isEmpty():
            return
        if self.cdc.change_feed:
            batch = net_changes(batch, self.cdc).localCheckpoint(eager=True)
        why = unusable(batch, self.cdc)
        bad = self.quarantined(batch.where(why.isNotNull()), why)
        events = events_of(batch.where(why.isNull()), self.cdc).distinct().localCheckpoint(eager=True)
        stored = self.stored(events)  # the store before this batch, read once
        self.refuse_new_columns(events, stored)
        conflicts = self.conflicts(events, stored)
        if not conflicts.isEmpty():
            on = [*self.cdc.keys, SEQUENCE]
            reason = F.lit(
                "another event of this key has the same sequence and other values (leave columns that differ "
                "between deliveries of one event, such as bronze's _ingested_at, out with cdc.except_columns)"
            )
            clashing = events.join(conflicts, on, "left_semi")  # each with its sequence and kind
            bad = bad.unionByName(self.quarantined(clashing, reason))
            events = events.join(conflicts, on, "left_anti").localCheckpoint(eager=True)  # before the store changes
        bad = bad.localCheckpoint(eager=True)
        if not bad.isEmpty():  # counted from the quarantine's log once the query ends, as every table's
            self.write(bad, self.quarantine, "append", batch_id)
        self.create_tables(events)
        if self.cdc.scd_type == 1:
            self.apply_scd1(events, batch_id)
        else:
            self.apply_scd2(events, batch_id)

    def stored(self, events: DataFrame) -> DataFrame | None:
        """The change store, or None before the first batch created it."""
        if delta_version(self.changes) < 0:
            return None
        return events.sparkSession.read.format("delta").load(self.changes)

    def refuse_new_columns(self, events: DataFrame, stored: DataFrame | None) -> None:
        """A CDC table keeps the columns it was built with (its store and MERGEs name them): an upstream that gained
        or lost one stops the run before any write, naming the columns and the fix."""
        if stored is None:
            return
        columns = stored.columns
        new, gone = [c for c in events.columns if c not in columns], [c for c in columns if c not in events.columns]
        if new or gone:
            raise ValueError(
                f"{self.table.id}: the columns it keeps changed since it was built (new: {new}, gone: {gone}). "
                f"Fix: leave new columns out with cdc.except_columns (or name the kept ones with cdc.columns), or "
                f"rebuild the table with them: millpond run <pipeline> --full-refresh {self.table.id}"
            )

    def conflicts(self, events: DataFrame, stored: DataFrame | None) -> DataFrame:
        """(key, sequence) pairs held by two different events, in this batch or between it and the store."""
        on = [*self.cdc.keys, SEQUENCE]
        seen = events
        if stored is not None:
            seen = events.unionByName(stored.join(events.select(*on).distinct(), on, "left_semi")).distinct()
        return seen.groupBy(*on).count().where("count > 1").select(*on)

    def quarantined(self, rows: DataFrame, why: Column) -> DataFrame:
        """Set-aside rows as the quarantine keeps them: each row as JSON, why, and which run."""
        return rows.select(
            F.to_json(F.struct(*map(_col, rows.columns))).alias("record"),
            why.alias("reason"),
            F.lit(self.run.run_id).alias("run_id"),
            F.lit(datetime.now(UTC)).alias("quarantined_at"),
        )

    def create_tables(self, events: DataFrame) -> None:
        """MERGE needs its target: the first batch creates the store and the table, empty, with their schemas."""
        if delta_version(self.changes) < 0:
            check_writer()
            events.limit(0).write.format("delta").mode("append").save(self.changes)
        if delta_version(self.path) < 0:
            empty = events.limit(0).drop(SEQUENCE, DELETED)
            if self.cdc.scd_type == 2:
                sequence = events.schema[SEQUENCE].dataType
                empty = empty.withColumn(START_AT, F.lit(None).cast(sequence))
                empty = empty.withColumn(END_AT, F.lit(None).cast(sequence))
            check_writer()
            empty.write.format("delta").mode("append").save(self.path)

    def apply_scd1(self, events: DataFrame, batch_id: int) -> None:
        """The store keeps each key's newest event (a delete too: a tombstone); the table each live key's row."""
        keys = self.on(self.cdc.keys)
        merge_into(
            self.changes,
            newest_per_key(events, self.cdc),
            f"{keys} WHEN MATCHED AND s.{SEQUENCE} > t.{SEQUENCE} THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
            self.app_id,
            batch_id,
        )
        inject_fault(self.table.id, "between_writes", batch_id)  # the store committed, the table not yet
        newest = self.stored_for(events)
        columns = [c for c in events.columns if c not in (SEQUENCE, DELETED)]
        merge_into(
            self.path,
            newest,
            f"{keys} WHEN MATCHED AND s.{DELETED} THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {self.assignments(columns)} "
            f"WHEN NOT MATCHED AND NOT s.{DELETED} THEN INSERT {self.inserted(columns)}",
            self.app_id,
            batch_id,
        )

    def apply_scd2(self, events: DataFrame, batch_id: int) -> None:
        """The store keeps every distinct event; the batch's keys' versions are recomputed from it, and the table's
        rows of those keys become exactly those versions (one MERGE: new, changed and vanished versions)."""
        on = self.on([*self.cdc.keys, SEQUENCE])
        merge_into(self.changes, events, f"{on} WHEN NOT MATCHED THEN INSERT *", self.app_id, batch_id)
        inject_fault(self.table.id, "between_writes", batch_id)  # the store committed, the table not yet
        versions = scd2_versions(self.stored_for(events), self.cdc)
        current = events.sparkSession.read.format("delta").load(self.path)
        current = current.join(events.select(*map(_col, self.cdc.keys)).distinct(), list(self.cdc.keys), "left_semi")
        vanished = current.select(*map(_col, self.cdc.keys), START_AT).join(
            versions.select(*map(_col, self.cdc.keys), START_AT), [*self.cdc.keys, START_AT], "left_anti"
        )
        source = versions.withColumn(_ACTION, F.lit("upsert")).unionByName(
            vanished.withColumn(_ACTION, F.lit("delete")), allowMissingColumns=True
        )
        columns = list(versions.columns)
        values = [c for c in columns if c not in (*self.cdc.keys, START_AT)]
        merge_into(
            self.path,
            source.localCheckpoint(eager=True),  # computed from the table it replaces rows of: fixed first
            f"{self.on([*self.cdc.keys, START_AT])} WHEN MATCHED AND s.{_ACTION} = 'delete' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {self.assignments(values)} "
            f"WHEN NOT MATCHED AND s.{_ACTION} = 'upsert' THEN INSERT {self.inserted(columns)}",
            self.app_id,
            batch_id,
        )

    def stored_for(self, events: DataFrame) -> DataFrame:
        """The store's rows of the batch's keys, read after the store's commit (or its skip on a replay)."""
        stored = events.sparkSession.read.format("delta").load(self.changes)
        keys = events.select(*map(_col, self.cdc.keys)).distinct()
        return stored.join(keys, list(self.cdc.keys), "left_semi")

    @staticmethod
    def on(columns: list[str] | tuple[str, ...]) -> str:
        return " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in columns)

    @staticmethod
    def assignments(columns: list[str]) -> str:
        return ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)

    @staticmethod
    def inserted(columns: list[str]) -> str:
        names = ", ".join(f"`{c}`" for c in columns)
        return f"({names}) VALUES ({', '.join(f's.`{c}`' for c in columns)})"


def _col(name: str) -> Column:
    return F.col(f"`{name}`")
