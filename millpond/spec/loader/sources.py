"""Sources: landing folders read as files (streamed, or whole as a dimension), Kafka topics, and other jobs'
Delta tables (their change data feeds)."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any

from millpond.spec.loader.fields import SpecCheck, boolean, ddl, fields, rate_limit
from millpond.spec.loader.kafka import bootstrap_servers, kafka_options
from millpond.spec.model import (
    FILE_SOURCE_FORMATS,
    GLOB_CHARACTERS,
    GLOB_SHOWN,
    KAFKA_VALUE_FORMATS,
    SCHEMA_DRIFT,
    SOURCE_FORMATS,
    STATIC_FORMATS,
    DeltaSource,
    FileSource,
    KafkaSource,
)
from millpond.spec.reprocess import layout_problem
from millpond.spec.syntax import NAME, TOPIC, ddl_types, did_you_mean

# A file source's fields (name -> required).
FILE_SOURCE_FIELDS = {
    "format": True,
    "path": True,
    "schema": False,
    "options": False,
    "rate_limit": False,
    "schema_drift": False,
    "static": False,
    "event_time": False,
    "layout": False,
}


def file_source(check: SpecCheck, name: str, raw: Any) -> FileSource | None:
    where = f"sources.{name}"
    spec = fields(check, where, raw, FILE_SOURCE_FIELDS)
    if not NAME.match(name):
        check.problem(where, f"{name!r} is not a valid source name", "use lower_snake_case")
    static = boolean(check, f"{where}.static", spec.get("static", False))
    fmt = str(spec.get("format", ""))
    if spec and fmt not in (STATIC_FORMATS if static else FILE_SOURCE_FORMATS):
        fix = f"use one of {', '.join(STATIC_FORMATS)}" if static else f"use one of {', '.join(SOURCE_FORMATS)}"
        check.problem(f"{where}.format", f"unknown format {fmt!r}", fix)
    if static:
        for name_ in ("rate_limit", "schema_drift"):
            if name_ in spec:
                check.problem(
                    f"{where}.{name_}",
                    f"a static source is read whole each run, so {name_} does not apply",
                    "remove it, or drop 'static: true' to stream the source",
                )
    schema = spec.get("schema")
    if spec and not schema and not (static and fmt == "delta"):
        check.problem(
            f"{where}.schema",
            "a file source needs a schema (inferring one per run drifts silently)",
            "add 'schema:' with Spark DDL, e.g. 'id BIGINT, name STRING'",
        )
    elif schema:
        ddl(check, f"{where}.schema", str(schema))
    options = spec.get("options") or {}
    if not isinstance(options, dict):
        check.problem(f"{where}.options", "expected a mapping of reader options", "e.g. options: {header: 'true'}")
        options = {}
    for required in FILE_SOURCE_FORMATS.get(fmt, ()):  # a dimension is read with the same options
        if required not in options:
            check.problem(
                f"{where}.options.{required}",
                f"a {fmt} source needs the reader option {required!r}",
                f"add it under options (docs/spec.md, `format`), e.g. options: {{{required}: ...}}",
            )
    path = str(spec.get("path", ""))
    lake_path(check, f"{where}.path", path)
    drift = schema_drift(check, f"{where}.schema_drift", fmt, spec.get("schema_drift"))
    event_time, layout = event_time_of(check, where, spec, str(schema or ""), static)
    if not spec:
        return None
    return FileSource(
        name=name,
        format=fmt,
        path=path,
        schema=str(schema or ""),
        options={str(k): str(v) for k, v in options.items()},
        rate_limit=rate_limit(check, f"{where}.rate_limit", spec.get("rate_limit")),
        schema_drift=drift,
        static=static,
        event_time=event_time,
        layout=layout,
    )


def delta_source(check: SpecCheck, name: str, raw: Any) -> DeltaSource | None:
    """A Delta table another job writes, streamed as its change data feed (its schema is the table's own)."""
    where = f"sources.{name}"
    dimension_only = [key for key in FILE_SOURCE_FIELDS if key not in ("format", "path", "static")]
    for key in (k for k in raw if k in dimension_only):
        static_fix = key not in ("rate_limit", "schema_drift", "event_time", "layout")  # a dimension refuses these
        check.problem(
            f"{where}.{key}",
            "without 'static: true' a delta source is another job's table, streamed as its change data feed: "
            f"it has its own schema, and {key} does not apply",
            "remove it"
            + (
                f", or add 'static: true' to read the table whole as a dimension (then landing.{name})"
                if static_fix
                else ""
            ),
        )
    allowed = {"format": True, "path": True, "static": False, **dict.fromkeys(dimension_only, False)}
    spec = fields(check, where, raw, allowed)
    if not NAME.match(name):
        check.problem(where, f"{name!r} is not a valid source name", "use lower_snake_case")
    if not spec:
        return None
    written = str(spec.get("path", ""))
    lake_path(check, f"{where}.path", written)
    path = posixpath.normpath(written) if written else written  # `./silver//t/` is silver/t (tables.py's checks)
    if "path" in spec and path in ("", "."):
        check.problem(f"{where}.path", "the lake root itself is no Delta table", "give the table's folder")
    return DeltaSource(name=name, path=path)


def event_time_of(
    check: SpecCheck, where: str, spec: dict[str, Any], schema: str, static: bool
) -> tuple[str | None, str | None]:
    """A streamed source's event-time column (a TIMESTAMP of its schema) and landing layout, checked here."""
    column, layout = spec.get("event_time"), spec.get("layout")
    if column is None and layout is None:
        return None, None
    if static:
        check.problem(
            f"{where}.event_time",
            "a static source is read whole each run: it has no event time to reprocess by",
            "remove event_time and layout, or drop 'static: true'",
        )
        return None, None
    if column is None:
        check.problem(
            f"{where}.layout",
            "a layout maps event time to folders, so it needs the source's event_time",
            "add 'event_time: <a TIMESTAMP column of the schema>'",
        )
        return None, None
    types = {name.lower(): (name, kind) for name, kind in ddl_types(schema)}
    column, kind = types.get(str(column).lower(), (str(column), None))
    if kind is None:
        check.problem(
            f"{where}.event_time",
            f"{column!r} is not a column of the source's schema",
            "name a TIMESTAMP column of 'schema:'" + did_you_mean(str(column), [n for n, _ in ddl_types(schema)]),
        )
    elif kind != "timestamp":
        check.problem(
            f"{where}.event_time",
            f"{column!r} is {kind.upper()}, not TIMESTAMP",
            "declare it TIMESTAMP in 'schema:' (an ISO-8601 string parses)",
        )
    if layout is not None:
        problem = layout_problem(str(layout))
        if problem:
            check.problem(f"{where}.layout", problem, "write it like 'date=YYYY-MM-DD/hour=HH' or 'YYYY/MM/DD'")
    return str(column), (str(layout).strip("/") if layout is not None else None)


def kafka_source(check: SpecCheck, name: str, raw: Any) -> KafkaSource | None:
    where = f"sources.{name}"
    spec = fields(
        check,
        where,
        raw,
        {
            "format": True,
            "bootstrap_servers": True,
            "subscribe": True,
            "schema": False,
            "value_format": False,
            "starting_offsets": False,
            "options": False,
            "rate_limit": False,
            "schema_drift": False,
        },
    )
    if not NAME.match(name):
        check.problem(where, f"{name!r} is not a valid source name", "use lower_snake_case")
    if not spec:
        return None
    schema = spec.get("schema")
    if not schema:
        check.problem(
            f"{where}.schema",
            "a kafka source needs the schema of its JSON message values (inferring one per run drifts silently)",
            "add 'schema:' with Spark DDL, e.g. 'device STRING, ts TIMESTAMP'",
        )
    else:
        ddl(check, f"{where}.schema", str(schema))
    value_format = str(spec.get("value_format", "json"))
    if value_format not in KAFKA_VALUE_FORMATS:
        check.problem(
            f"{where}.value_format",
            f"unknown value format {value_format!r}",
            "use json (one JSON object per message value; avro and protobuf are not supported yet)",
        )
    topics = topics_of(check, f"{where}.subscribe", spec.get("subscribe"))
    return KafkaSource(
        name=name,
        bootstrap_servers=bootstrap_servers(check, f"{where}.bootstrap_servers", spec.get("bootstrap_servers")),
        topics=topics,
        schema=str(schema or ""),
        starting_offsets=starting_offsets(check, f"{where}.starting_offsets", spec.get("starting_offsets"), topics),
        value_format=value_format,
        options=kafka_options(check, f"{where}.options", spec.get("options")),
        rate_limit=rate_limit(check, f"{where}.rate_limit", spec.get("rate_limit"), kafka=True),
        schema_drift=schema_drift(check, f"{where}.schema_drift", "json", spec.get("schema_drift")),
    )


def topics_of(check: SpecCheck, where: str, raw: Any) -> tuple[str, ...]:
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or not all(isinstance(t, str) and TOPIC.match(t) for t in names):
        check.problem(
            where,
            f"{raw!r} is not a list of topic names (letters, digits, '.', '_', '-')",
            "write e.g. subscribe: [device_events] (several topics: a YAML list, not 'a,b')",
        )
        return ()
    return tuple(names)


def starting_offsets(check: SpecCheck, where: str, raw: Any, topics: tuple[str, ...]) -> str:
    """earliest (default: a bronze table wants every retained message), latest, or offsets per partition."""
    if raw is None:
        return "earliest"
    if raw in ("earliest", "latest"):
        return str(raw)
    fix = (
        "use earliest, latest, or {<topic>: {<partition>: <offset>}} (offset -2 = earliest, -1 = latest) for "
        "subscribed topics"
    )
    if not isinstance(raw, dict) or not raw:
        check.problem(where, f"{raw!r} is not a starting position", fix)
        return "earliest"
    offsets: dict[str, dict[str, int]] = {}
    for topic, partitions in raw.items():
        if topic not in topics:
            check.problem(f"{where}.{topic}", "not a subscribed topic", f"{fix}; subscribed: {', '.join(topics)}")
            continue
        good = (
            isinstance(partitions, dict)
            and partitions
            and all(
                str(p).isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= -2
                for p, o in partitions.items()
            )
        )
        if not good:
            check.problem(f"{where}.{topic}", f"{partitions!r} is not {{partition: offset}}", fix)
            continue
        offsets[str(topic)] = {str(p): o for p, o in partitions.items()}
    return json.dumps(offsets, sort_keys=True)


def schema_drift(check: SpecCheck, where: str, fmt: str, raw: Any) -> str:
    if raw is None:
        return "rescue"
    if str(raw) not in SCHEMA_DRIFT:
        check.problem(
            where,
            f"unknown policy {raw!r}",
            "use rescue (default: keep new fields as JSON in _rescued_data), add (new fields become "
            "columns) or fail (stop the run)",
        )
        return "rescue"
    if fmt != "json":
        check.problem(
            where,
            f"schema_drift applies to json sources only, not {fmt}",
            "remove it (a csv line with extra fields is quarantined as 'too many fields')",
        )
    return str(raw)


def lake_path(check: SpecCheck, where: str, path: str) -> None:
    if not path:
        return
    if odd := " ".join(sorted(GLOB_CHARACTERS & set(path))):
        check.problem(
            where,
            f"{path!r} holds {odd}, which Spark's file source reads as a glob pattern (it would "
            "read other files or folders)",
            f"rename the folder without {GLOB_SHOWN}",
        )
        return
    if Path(path).is_absolute() or "://" in path:
        check.problem(where, f"{path!r} is absolute", "give a path relative to the lake root ($MILLPOND_LAKE)")
        return
    root = check.lake_root.resolve()
    if not (root / path).resolve().is_relative_to(root):
        check.problem(where, f"{path!r} points outside the lake root {root}", "keep paths inside $MILLPOND_LAKE")
