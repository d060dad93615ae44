"""A table's query: transform, aggregate, trigger, and what Structured Streaming allows of them together."""

from __future__ import annotations

import re
from typing import Any

from millpond.spec.loader.fields import SpecCheck, columns, duration, fields
from millpond.spec.model import Aggregate, Table, Transform, Trigger, Window
from millpond.spec.syntax import FUNCTION_REF, duration_seconds
from millpond.spec.user_code import find_module

_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def transform(check: SpecCheck, where: str, raw: Any) -> Transform | None:
    if raw is None:
        return None
    spec = fields(check, where, raw, {"sql": False, "function": False})
    sql, function = spec.get("sql"), spec.get("function")
    if bool(sql) == bool(function):
        check.problem(
            where,
            "give exactly one of 'sql' or 'function'",
            "sql: SELECT ... FROM source  |  function: package.module:function",
        )
    if function and not FUNCTION_REF.match(str(function)):
        check.problem(
            f"{where}.function",
            f"{function!r} is not 'module:function'",
            "e.g. spark_jobs.transforms.activity:clean",
        )
    elif function and find_module(str(function).split(":")[0]) is None:
        check.problem(
            f"{where}.function",
            f"module {str(function).split(':')[0]!r} not found",
            "put transforms in spark_jobs/transforms/<pipeline>.py",
        )
    if sql and not re.search(r"\bsource\b", str(sql), re.IGNORECASE):
        check.problem(f"{where}.sql", "the query does not read the view 'source'", "write ... FROM source")
    return Transform(sql=str(sql) if sql else None, function=str(function) if function else None)


def aggregate(check: SpecCheck, where: str, raw: Any) -> Aggregate | None:
    if raw is None:
        return None
    spec = fields(check, where, raw, {"group_by": False, "window": False, "measures": True})
    window = None
    if spec.get("window") is not None:
        w = fields(
            check, f"{where}.window", spec["window"], {"column": True, "duration": True, "slide": False, "as": False}
        )
        duration(check, f"{where}.window.duration", w.get("duration"))
        duration(check, f"{where}.window.slide", w.get("slide"))
        window = Window(
            str(w.get("column", "")),
            str(w.get("duration", "")),
            str(w["slide"]) if w.get("slide") else None,
            str(w.get("as", "window")),
        )
    measures = spec.get("measures") or {}
    if not isinstance(measures, dict) or not measures:
        check.problem(
            f"{where}.measures",
            "expected a mapping of output column -> aggregate expression",
            "e.g. measures: {total: count(*), avg_x: avg(x)}",
        )
        measures = {}
    group_by = columns(check, f"{where}.group_by", spec.get("group_by"))
    if not group_by and window is None:
        check.problem(where, "an aggregation needs 'group_by' or 'window'", "add group_by: [column, ...]")
    return Aggregate(group_by, tuple((str(k), str(v)) for k, v in measures.items()), window)


def trigger(check: SpecCheck, where: str, raw: Any) -> Trigger:
    if isinstance(raw, str) and raw in ("availableNow", "once"):
        return Trigger(raw)
    if isinstance(raw, dict) and set(raw) == {"processingTime"}:
        duration(check, f"{where}.processingTime", raw["processingTime"])
        return Trigger("processingTime", str(raw["processingTime"]))
    check.problem(
        where, f"{raw!r} is not a trigger", "use availableNow (default), once, or {processingTime: '1 minute'}"
    )
    return Trigger()


def streaming_rules(check: SpecCheck, where: str, table: Table) -> None:
    """Reject what Structured Streaming would only reject at run time (or never, silently)."""
    agg, mark = table.aggregate, table.watermark
    output_mode_rules(check, where, table)
    if table.output_mode == "update":
        update_rules(check, where, table)
    if agg and agg.window:
        window_rules(check, f"{where}.aggregate.window", agg.window)
    if table.dedup_keys and not mark:
        check.problem(
            f"{where}.dedup",
            "deduplication without a watermark keeps every key in state forever",
            "add 'watermark: {column: <event time>, delay: ...}'",
        )
    if table.order_by and not (agg and table.output_mode == "complete"):
        check.problem(
            f"{where}.order_by",
            "sorting a stream is only supported after an aggregation in complete mode",
            "drop order_by (sort when you read the table) or aggregate in complete mode",
        )
    sql = table.transform.sql if table.transform else None
    if sql and _ORDER_BY.search(sql):
        check.problem(
            f"{where}.transform.sql",
            "ORDER BY on a stream is not supported (nor window functions)",
            "remove ORDER BY; sort when you read the table, or use order_by after a complete-mode aggregation",
        )
    if table.reads_source and table.is_stateful:
        check.problem(
            where,
            "a table reading landing files or Kafka ingests them as they are (with quarantine)",
            "deduplicate or aggregate in a downstream table that reads this one",
        )
    if table.reads_source and table.layer != "bronze":
        check.problem(
            f"{where}.from", "only bronze tables read landing files or Kafka", "read the source in a bronze table"
        )


def output_mode_rules(check: SpecCheck, where: str, table: Table) -> None:
    """What complete and append mode need of the table's aggregation and watermark."""
    agg, mark = table.aggregate, table.watermark
    if table.output_mode == "complete" and table.stateful:
        check.problem(
            f"{where}.output_mode",
            "a stateful function emits its rows itself, so Spark cannot rewrite "
            "its whole result every batch (complete mode)",
            "use output_mode: append (each row written once) or update (rows MERGEd on keys)",
        )
    elif table.output_mode == "complete" and not agg:
        check.problem(
            f"{where}.output_mode",
            "complete mode needs an aggregation",
            "add an 'aggregate:' block, or use output_mode: append",
        )
    if table.output_mode == "append" and agg:
        if not mark:
            check.problem(
                f"{where}.aggregate",
                "an append-mode aggregation needs a watermark (rows are emitted only once their window is final)",
                "add 'watermark: {column: ..., delay: ...}' or use output_mode: complete",
            )
        elif agg.window and agg.window.column != mark.column:
            check.problem(
                f"{where}.aggregate.window.column",
                f"append mode emits a window once the watermark "
                f"passes its end, but the window is on {agg.window.column!r} and the watermark on "
                f"{mark.column!r}",
                f"window on {mark.column} (or put the watermark on {agg.window.column})",
            )
        elif not agg.window and mark.column not in agg.group_by:
            check.problem(
                f"{where}.aggregate",
                f"append mode must group by the watermark column {mark.column!r} (or a window on it)",
                f"add window: {{column: {mark.column}, duration: ...}}",
            )


def update_rules(check: SpecCheck, where: str, table: Table) -> None:
    """Update mode MERGEs each batch on the table's keys: they must identify exactly one aggregate row."""
    if table.stateful:
        stateful_update_rules(check, where, table)
        return
    if not table.aggregate:
        if not table.dedup_keys:
            check.problem(
                f"{where}.output_mode",
                "update mode rewrites aggregate rows in place, and this table "
                "has no aggregate (nor dedup): every row it writes is new",
                "use output_mode: append",
            )
        return  # dedup: each surviving row is emitted once, exactly as in append mode
    expected = ", ".join(table.aggregate_keys)
    if not table.keys:
        check.problem(
            f"{where}.keys",
            "update mode MERGEs each batch into the table on its keys, and none are given",
            f"add keys: [{expected}] (the window alias, then group_by)",
        )
    elif sorted(table.keys) != sorted(table.aggregate_keys):
        check.problem(
            f"{where}.keys",
            f"update mode MERGEs on the keys, which must identify one aggregate row: "
            f"[{', '.join(table.keys)}] is not the window alias plus group_by",
            f"set keys: [{expected}]",
        )
    no_gate_on_update(check, where, table, "append or complete")


def stateful_update_rules(check: SpecCheck, where: str, table: Table) -> None:
    """A stateful function in update mode: its rows are MERGEd on `keys`, which must be columns it outputs."""
    columns = table.stateful.output_columns if table.stateful else ()
    if not table.keys:
        check.problem(
            f"{where}.keys",
            "update mode MERGEs each batch into the table on its keys, and none are given",
            f"add keys: [...] naming output_schema columns ({', '.join(columns)})",
        )
    missing = [key for key in table.keys if key not in columns]
    if missing:
        check.problem(
            f"{where}.keys",
            f"{', '.join(missing)} not in the stateful function's output_schema",
            f"use columns of output_schema: {', '.join(columns)}",
        )
    no_gate_on_update(check, where, table, "append")


def window_rules(check: SpecCheck, where: str, window: Window) -> None:
    duration, slide = duration_seconds(window.duration), duration_seconds(window.slide)
    if duration and slide and slide > duration:
        check.problem(
            f"{where}.slide",
            f"slide {window.slide!r} is longer than the window duration "
            f"{window.duration!r}: rows between two windows would belong to none",
            "use a slide no longer than the duration (slide = duration, or no slide, is tumbling)",
        )


def no_gate_on_update(check: SpecCheck, where: str, table: Table, modes: str) -> None:
    """An update-mode table cannot be gated: each row is the latest value of its key."""
    if table.expectations:
        check.problem(
            f"{where}.expectations",
            "a gate cannot set rows of an update-mode table aside: each row is "
            "the latest value of its key, so holding one back would leave the key's stale value in the "
            "table",
            f"gate the upstream table, or use output_mode: {modes}",
        )
