"""Sinks: where a table's rows go (Delta by default, files, or a Kafka topic) and what each can take."""

from __future__ import annotations

from typing import Any

from millpond.spec.loader.fields import SpecCheck, fields
from millpond.spec.loader.kafka import bootstrap_servers, kafka_options
from millpond.spec.model import DEFAULT_KAFKA_VALUE, KAFKA, SINK_FORMATS, Sink, Table
from millpond.spec.syntax import TOPIC


def sink(check: SpecCheck, where: str, raw: Any) -> Sink:
    if raw is None:
        return Sink()
    if isinstance(raw, dict) and raw.get("format") == KAFKA:
        return kafka_sink(check, where, raw)
    spec = fields(check, where, raw, {"format": True, "options": False})
    fmt = str(spec.get("format", "delta"))
    if spec and fmt not in SINK_FORMATS:
        check.problem(f"{where}.format", f"unknown sink format {fmt!r}", f"use one of {', '.join(SINK_FORMATS)}")
        fmt = "delta"
    options = spec.get("options") or {}
    if not isinstance(options, dict):
        check.problem(f"{where}.options", "expected a mapping of writer options", "e.g. options: {header: 'true'}")
        options = {}
    if options and fmt == "delta":
        check.problem(
            f"{where}.options",
            "writer options apply to file sinks only",
            "remove them, or set sink.format to parquet, json or csv",
        )
    return Sink(fmt, {str(k): str(v) for k, v in options.items()})


def kafka_sink(check: SpecCheck, where: str, raw: dict) -> Sink:
    spec = fields(
        check,
        where,
        raw,
        {"format": True, "topic": True, "bootstrap_servers": True, "key": False, "value": False, "options": False},
    )
    topic = spec.get("topic")
    if topic is not None and not (isinstance(topic, str) and TOPIC.match(topic)):
        check.problem(
            f"{where}.topic",
            f"{topic!r} is not a topic name (letters, digits, '.', '_', '-')",
            "write e.g. topic: device_alerts",
        )
    expressions = {}
    for name in ("key", "value"):
        value = spec.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            check.problem(
                f"{where}.{name}",
                f"{value!r} is not a Spark SQL expression",
                f"write e.g. {name}: {'device' if name == 'key' else DEFAULT_KAFKA_VALUE}",
            )
            value = None
        expressions[name] = value
    return Sink(
        KAFKA,
        kafka_options(check, f"{where}.options", spec.get("options")),
        topic=str(topic or ""),
        bootstrap_servers=bootstrap_servers(check, f"{where}.bootstrap_servers", spec.get("bootstrap_servers")),
        key=expressions["key"],
        value=expressions["value"] or DEFAULT_KAFKA_VALUE,
    )


def kafka_sink_rules(check: SpecCheck, where: str, table: Table) -> None:
    """What a Kafka topic can take: appended messages, sent at least once, from a table reading Delta."""
    if table.output_mode == "complete":
        check.problem(
            f"{where}.output_mode",
            "a Kafka sink appends messages, and complete mode would send the whole result again every batch",
            "use output_mode: update (each changed row is sent once per batch) or append",
        )
    if table.expectations:
        check.problem(
            f"{where}.expectations",
            "the quality gate writes passing rows and set-aside rows to Delta "
            "(write-audit-publish), so it cannot gate a Kafka sink",
            "gate the Delta table this one reads, or drop 'sink:'",
        )
    if table.reads_source:
        check.problem(
            f"{where}.sink",
            "a table reading a source splits each batch into the table and its Delta "
            "quarantine, which a Kafka sink cannot do",
            f"keep {table.id} on Delta and add a table with 'from: {table.id}' and this sink",
        )


def file_sink_rules(check: SpecCheck, where: str, table: Table) -> None:
    """What Spark's file sink cannot do, or what millpond's Delta-only machinery around a table needs."""
    fmt = table.sink.format
    if table.output_mode != "append":
        check.problem(
            f"{where}.output_mode",
            f"a {fmt} file sink writes in append mode only (Spark's file sink "
            f"cannot rewrite or update rows), not {table.output_mode}",
            "use output_mode: append (an aggregate then needs a watermark), or drop 'sink:' to write Delta",
        )
    if table.expectations:
        check.problem(
            f"{where}.expectations",
            "the quality gate writes passing rows and set-aside rows to Delta "
            "(write-audit-publish), so it cannot gate a file sink",
            "gate the Delta table this one reads, or drop 'sink:'",
        )
    if table.reads_source:
        check.problem(
            f"{where}.sink",
            f"a table reading {'landing files' if table.reads_landing else 'Kafka'} "
            "splits each batch into the table and its Delta quarantine, which a file sink cannot do",
            f"keep {table.id} on Delta and add a table with 'from: {table.id}' and this sink",
        )
