"""Joins: `join:` (stream-stream, with another table) and `lookup:` (stream-static, with a dimension)."""

from __future__ import annotations

from typing import Any

from millpond.spec.loader.fields import SpecCheck, columns, fields, watermark
from millpond.spec.model import (
    JOIN_TYPES,
    LANDING,
    LOOKUP_TYPES,
    DeltaSource,
    FileSource,
    Join,
    Lookup,
    Source,
    Table,
    normalize_table_id,
)
from millpond.spec.syntax import SIGNED_DURATION, ddl_columns, signed_seconds

# What Spark refuses for a stream-static join with the stream on the left: each unmatched dimension row would have to
# wait for the end of an unbounded stream.
_STREAM_LEFT_UNSUPPORTED = ("right_outer", "right", "full_outer", "full", "outer")


def without_bare_on(check: SpecCheck, where: str, raw: Any) -> Any:
    """YAML 1.1 reads a bare `on:` key as the boolean true: report it and drop it."""
    if isinstance(raw, dict) and True in raw:
        check.problem(
            f"{where}.on",
            "YAML reads the key 'on' as true, so it never names the join keys",
            "write the keys as using: [column, ...]",
        )
        return {k: v for k, v in raw.items() if k is not True}
    return raw


def join(check: SpecCheck, where: str, raw: Any) -> Join | None:
    if raw is None:
        return None
    raw = without_bare_on(check, where, raw)
    spec = fields(
        check, where, raw, {"with": True, "using": True, "type": False, "watermark": True, "time_range": True}
    )
    kind = str(spec.get("type", "inner"))
    if kind not in JOIN_TYPES:
        check.problem(
            f"{where}.type",
            f"unknown join type {kind!r}",
            f"use one of {', '.join(JOIN_TYPES)} (inner: matched pairs only; left_outer: also each "
            "unmatched 'from' row once, with nulls)",
        )
    using = columns(check, f"{where}.using", spec.get("using"))
    if "using" in spec and not using:
        check.problem(
            f"{where}.using",
            "a join needs at least one key column, equal on both sides",
            "write e.g. using: [impression_id]",
        )
    return Join(
        with_table=normalize_table_id(str(spec.get("with", ""))),
        using=using,
        watermark=watermark(check, f"{where}.watermark", spec.get("watermark")),
        time_range=time_range(check, f"{where}.time_range", spec.get("time_range")),
        type=kind,
    )


def time_range(check: SpecCheck, where: str, raw: Any) -> tuple[str, str]:
    """`{min: ..., max: ...}`: signed durations, min <= max (the `with` side's time minus the `from` side's)."""
    if raw is None:
        return ("", "")
    spec = fields(check, where, raw, {"min": True, "max": True})
    bounds = []
    for name in ("min", "max"):
        value = str(spec.get(name, "")).strip()
        if name in spec and not SIGNED_DURATION.match(value):
            check.problem(
                f"{where}.{name}",
                f"{spec.get(name)!r} is not a duration",
                "write e.g. '0 seconds', '1 hour' or '-10 minutes' (before the 'from' row's time)",
            )
        bounds.append(value)
    low, high = signed_seconds(bounds[0]), signed_seconds(bounds[1])
    if low is not None and high is not None and low > high:
        check.problem(
            where, f"min {bounds[0]!r} is after max {bounds[1]!r}: no row could ever match", "give min <= max"
        )
    return (bounds[0], bounds[1])


def join_rules(check: SpecCheck, where: str, table: Table) -> None:
    """What a stream-stream join needs to run in bounded state, and what millpond keeps out of a join table."""
    join = table.join
    assert join is not None
    if not table.watermark:
        check.problem(
            f"{where}.watermark",
            "a join buffers the rows of both sides in state until the watermarks "
            "say they can no longer match; without a watermark on the 'from' side its rows stay forever",
            "add 'watermark: {column: <the from side's event time>, delay: ...}'",
        )
    if table.output_mode != "append":
        check.problem(
            f"{where}.output_mode",
            f"a stream-stream join emits each joined row once and runs in append mode only, not {table.output_mode}",
            f"use output_mode: append, and aggregate in a table with 'from: {table.id}'",
        )
    if table.aggregate or table.dedup_keys or table.stateful:
        what = "aggregate" if table.aggregate else "dedup" if table.dedup_keys else "stateful"
        check.problem(
            f"{where}.{what}",
            f"a join table cannot also {'run a stateful function' if table.stateful else what} "
            "(one stateful step per table keeps each table's state and its checkpoint rules simple)",
            f"do it in a table with 'from: {table.id}'",
        )
    if table.expectations:
        check.problem(
            f"{where}.expectations",
            "a join table cannot be gated: `millpond check` replays one "
            "upstream's Delta versions, and a join reads two",
            f"gate a table with 'from: {table.id}'",
        )


def join_upstream_rules(check: SpecCheck, sources: dict[str, Source], tables: dict[str, Table], table: Table) -> None:
    """A join's `with` is another table of this pipeline, read as a Delta stream."""
    other = table.join.with_table if table.join else ""
    where = f"tables.{table.id}.join.with"
    if not other:
        return
    if other in sources or other.startswith(LANDING + "."):
        name, delta = other.split(".", 1)[1], isinstance(sources.get(other), DeltaSource)
        fix = (
            f"apply its change data feed in a table (from: {other}, cdc: {{change_feed: true, keys: [...]}}) and "
            "query that table in batch: a table updated in place cannot be joined as a stream"
            if delta
            else f"join the bronze table that ingests it (bronze.{name}: from: {other})"
        )
        kind = "Delta" if delta else "landing"
        check.problem(where, f"{other} is a {kind} source, and a join reads tables as Delta streams", fix)
    elif other == table.id:
        check.problem(where, "a table cannot join itself", "join an upstream table")
    elif other not in tables:
        others = ", ".join(t for t in tables if t != table.id)
        check.problem(where, f"unknown table {other!r}", f"join one of: {others}")
    elif tables[other].sink.is_file:
        check.problem(
            where,
            f"{other} writes {tables[other].sink.format} files, and a join reads tables as Delta streams",
            f"join {tables[other].source} instead, or drop {other}'s 'sink:'",
        )


def lookup(check: SpecCheck, where: str, raw: Any) -> Lookup | None:
    """A stream-static join. Stateless, so no watermark or time range; the stream stays on the left."""
    if raw is None:
        return None
    raw = without_bare_on(check, where, raw)
    if isinstance(raw, dict):
        for name in ("watermark", "time_range"):
            if name in raw:
                check.problem(
                    f"{where}.{name}",
                    "a lookup (stream-static join) keeps no state: each stream row "
                    f"is joined with the whole dimension as it is when the run starts, so a {name} "
                    "has nothing to bound",
                    f"remove '{name}:' (a stream-stream join, which needs it, is 'join:')",
                )
        raw = {k: v for k, v in raw.items() if k not in ("watermark", "time_range")}
    spec = fields(check, where, raw, {"with": True, "using": True, "type": False})
    kind = str(spec.get("type", "inner"))
    if kind in _STREAM_LEFT_UNSUPPORTED:
        check.problem(
            f"{where}.type",
            f"Spark does not run a {kind} stream-static join with the stream on the "
            "left: a dimension row nobody matched could only be emitted once the (unbounded) stream "
            "ends",
            "use inner or left_outer (every stream row once, with nulls when no dimension row matches)",
        )
    elif kind not in LOOKUP_TYPES:
        check.problem(
            f"{where}.type",
            f"unknown lookup type {kind!r}",
            f"use one of {', '.join(LOOKUP_TYPES)} (inner: stream rows with a dimension row only; "
            "left_outer: every stream row, with nulls when none matches)",
        )
    using = columns(check, f"{where}.using", spec.get("using"))
    if "using" in spec and not using:
        check.problem(
            f"{where}.using",
            "a lookup needs at least one key column, equal on both sides",
            "write e.g. using: [ad_id]",
        )
    return Lookup(normalize_table_id(str(spec.get("with", ""))), using, kind)


def lookup_upstream_rules(check: SpecCheck, sources: dict[str, Source], tables: dict[str, Table], table: Table) -> None:
    """A lookup's `with` is a static source; its keys are columns of that source's schema."""
    if not table.lookup or not table.lookup.dimension:
        return
    where, dimension = f"tables.{table.id}.lookup", table.lookup.dimension
    static = [s.id for s in sources.values() if isinstance(s, FileSource) and s.static]
    source = sources.get(dimension)
    if dimension in tables:
        check.problem(
            f"{where}.with",
            f"{dimension} is a table, and a lookup reads a static source",
            "join a table's stream with 'join:', or declare its folder as a source with 'static: true, "
            "format: delta' and look that up",
        )
    elif source is None:
        check.problem(
            f"{where}.with",
            f"unknown dimension {dimension!r}",
            f"look up one of: {', '.join(static)}"
            if static
            else "declare it under 'sources:' with "
            "'static: true' (format, path, schema) and name it here as landing.<name>",
        )
    elif isinstance(source, DeltaSource):
        check.problem(
            f"{where}.with",
            f"{dimension} is another job's Delta table streamed as its change data feed, and a lookup reads a "
            "dimension whole every run",
            f"add 'static: true' to sources.{source.name} and look it up as landing.{source.name}",
        )
    elif not (isinstance(source, FileSource) and source.static):
        check.problem(
            f"{where}.with",
            f"{dimension} is a streaming source (new files or messages are read once "
            "each), and a lookup reads a dimension whole every run",
            f"mark sources.{source.name} 'static: true' if it is a dimension, or read it in a bronze "
            "table and join that with 'join:'",
        )
    elif source.schema:
        columns = ddl_columns(source.schema)
        missing = [key for key in table.lookup.using if key.lower() not in {c.lower() for c in columns}]
        if missing:
            check.problem(
                f"{where}.using",
                f"{', '.join(missing)} not in {dimension}'s schema",
                f"use columns of sources.{source.name}.schema: {', '.join(columns)}",
            )
