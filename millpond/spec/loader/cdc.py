"""A table's `cdc:` block (a change feed applied as SCD type 1 or 2) and what the rest of the table must agree to."""

from __future__ import annotations

from typing import Any

from millpond.spec.loader.fields import SpecCheck, boolean, columns, fields
from millpond.spec.model import (
    CDC_RESERVED,
    CHANGE_FEED_COLUMNS,
    CHANGE_FEED_DELETES,
    COMMIT_VERSION,
    SCD_TYPES,
    Cdc,
    Table,
)

# A `cdc:` block's fields (name -> required): Lakeflow's AUTO CDC names, and `change_feed` (Delta's readChangeFeed).
CDC_FIELDS = {
    "keys": True,
    "sequence_by": False,  # required unless change_feed (its default: the upstream's commit version)
    "apply_as_deletes": False,
    "except_columns": False,
    "columns": False,
    "scd_type": False,
    "track_history_columns": False,
    "change_feed": False,
}


def cdc(check: SpecCheck, where: str, raw: Any) -> Cdc | None:
    if raw is None:
        return None
    spec = fields(check, where, raw, CDC_FIELDS)
    if not spec:
        return None
    change_feed = boolean(check, f"{where}.change_feed", spec.get("change_feed", False))
    keys = columns(check, f"{where}.keys", spec.get("keys"))
    if "keys" in spec and not keys:
        check.problem(f"{where}.keys", "no column is given", "e.g. keys: [id]")
    sequence_by = sequence_of(check, f"{where}.sequence_by", spec, change_feed)
    deletes = spec.get("apply_as_deletes", CHANGE_FEED_DELETES if change_feed else None)
    if deletes is not None and (not isinstance(deletes, str) or not deletes.strip()):
        check.problem(f"{where}.apply_as_deletes", f"{deletes!r} is not a SQL predicate", "e.g. \"op = 'D'\"")
    except_columns = columns(check, f"{where}.except_columns", spec.get("except_columns"))
    kept = columns(check, f"{where}.columns", spec.get("columns"))
    if except_columns and kept:
        check.problem(where, "both columns and except_columns are given", "name the columns kept, or those left out")
    scd_type = spec.get("scd_type", 1)
    if isinstance(scd_type, bool) or scd_type not in SCD_TYPES:
        check.problem(f"{where}.scd_type", f"{scd_type!r} is not 1 or 2", "1: one row per key, 2: one per version")
        scd_type = 1
    tracked = columns(check, f"{where}.track_history_columns", spec.get("track_history_columns"))
    if tracked and scd_type != 2:
        check.problem(
            f"{where}.track_history_columns", "only an SCD 2 table keeps history", "add scd_type: 2, or drop it"
        )
    if change_feed and not kept:  # Delta's own columns are read, not kept, unless named
        except_columns = (*except_columns, *(c for c in CHANGE_FEED_COLUMNS if c not in except_columns))
    return Cdc(
        keys=keys,
        sequence_by=sequence_by,
        apply_as_deletes=deletes if isinstance(deletes, str) else None,
        except_columns=except_columns,
        columns=kept,
        scd_type=scd_type,
        track_history_columns=tracked,
        change_feed=change_feed,
    )


def sequence_of(check: SpecCheck, where: str, spec: dict[str, Any], change_feed: bool) -> tuple[str, ...]:
    """The columns ordering the events: required, except on a change feed, which is applied in commit order."""
    sequence_by = columns(check, where, spec.get("sequence_by"))
    if "sequence_by" in spec and not sequence_by:
        check.problem(where, "no column is given", "e.g. sequence_by: seq")
    if change_feed and sequence_by and tuple(c.lower() for c in sequence_by) != (COMMIT_VERSION,):
        check.problem(
            where,
            "a change data feed is applied in commit order: a delete in it carries the deleted row's values, so a "
            "column of the row would give the delete the sequence of the row it deletes (a clash, quarantined)",
            f"drop sequence_by (its default is {COMMIT_VERSION})",
        )
    if "sequence_by" not in spec and not change_feed:
        check.problem(
            where,
            "required field is missing",
            "add 'sequence_by:' naming the column that orders the events, e.g. sequence_by: seq",
        )
    return sequence_by or ((COMMIT_VERSION,) if change_feed else ())


def cdc_rules(check: SpecCheck, where: str, table: Table) -> None:
    """A change feed is applied by its own MERGE per batch: what else the table asks of its batches is refused."""
    cdc = table.cdc
    assert cdc is not None
    upstream = "query this table in batch" if table.reads_delta_source else "{} the table this one reads"
    refusals = [
        ("aggregate", table.aggregate, "aggregate the events in a table of their own, or query this table in batch"),
        ("dedup", table.dedup_keys, "the newest event per key wins already; a duplicate changes nothing"),
        ("join", table.join, upstream.format("join in")),
        ("stateful", table.stateful, upstream.format("run the function in")),
        ("order_by", table.order_by, "sort when you read the table"),
        ("expectations", table.expectations, upstream.format("gate")),
    ]
    for name, present, fix in refusals:
        if present:
            check.problem(f"{where}.{name}", "a table applying a change feed cannot have this too", f"{fix}")
    if cdc.change_feed and (table.rate_limit.max_files_per_trigger or table.rate_limit.max_bytes_per_trigger):
        check.problem(
            f"{where}.rate_limit",
            "a change data feed is read in one batch per run: a commit Delta records without change files (an "
            "overwrite) is admitted file by file, and its delete and insert of one key must meet in one batch",
            "drop rate_limit",
        )
    if cdc.change_feed and table.transform:
        check.problem(
            f"{where}.transform",
            "a table applying another table's change data feed cannot transform it: a filter would keep a row "
            "whose update it drops, a rename would move its keys",
            "choose the columns kept with cdc.columns"
            + ("" if table.reads_delta_source else ", or transform in the table this one reads"),
        )
    if table.output_mode != "append":
        check.problem(
            f"{where}.output_mode",
            f"a change feed is read as the upstream's new rows: its query runs in append mode, not {table.output_mode}",
            "drop output_mode",
        )
    if table.reads_source:
        check.problem(
            f"{where}.cdc",
            "a table reading landing files or Kafka keeps every record as it lands (with quarantine)",
            f"apply the changes in a table with 'from: {table.id}'",
        )
    if not table.sink.is_delta:
        check.problem(f"{where}.sink", "changes are MERGEd, which only a Delta table takes", "drop the sink")
    cdc_column_rules(check, f"{where}.cdc", cdc)


def cdc_column_rules(check: SpecCheck, cdc_where: str, cdc: Cdc) -> None:
    """Keys and tracked columns are kept, tracked columns are not keys, and no name is one the table adds."""
    for name in (*cdc.keys, *cdc.track_history_columns):
        if name in cdc.except_columns:
            check.problem(f"{cdc_where}.except_columns", f"{name!r} is a key or a tracked column", f"keep {name!r}")
    if cdc.columns:
        missing = [c for c in (*cdc.keys, *cdc.track_history_columns) if c not in cdc.columns]
        if missing:
            check.problem(f"{cdc_where}.columns", f"{missing} must be kept", f"add {', '.join(missing)} to columns")
    tracked_keys = [c for c in cdc.track_history_columns if c in cdc.keys]
    if tracked_keys:
        check.problem(f"{cdc_where}.track_history_columns", f"{tracked_keys} are keys", "list value columns only")
    named = {*cdc.keys, *cdc.sequence_by, *cdc.columns, *cdc.except_columns, *cdc.track_history_columns}
    reserved = sorted(n for n in named if n.upper() in CDC_RESERVED)
    if reserved:
        check.problem(cdc_where, f"{reserved} are names the table's own columns take", "rename them in a transform")
