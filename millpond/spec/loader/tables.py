"""Tables: one `tables:` entry built from its parts, and all tables put in dependency order."""

from __future__ import annotations

from typing import Any

from millpond.spec.loader.cdc import cdc, cdc_rules
from millpond.spec.loader.fields import (
    SpecCheck,
    column_descriptions,
    columns,
    fields,
    freshness,
    rate_limit,
    watermark,
)
from millpond.spec.loader.joins import join, join_rules, join_upstream_rules, lookup, lookup_upstream_rules
from millpond.spec.loader.sinks import file_sink_rules, kafka_sink_rules, sink
from millpond.spec.loader.stateful import stateful, stateful_rules
from millpond.spec.loader.streaming import aggregate, streaming_rules, transform, trigger
from millpond.spec.model import (
    INGESTED_AT_COLUMN,
    KAFKA_COLUMNS,
    LAYERS,
    OUTPUT_MODES,
    RESCUED_COLUMN,
    SOURCE_FILE_COLUMN,
    DeltaSource,
    FileSource,
    KafkaSource,
    Source,
    Table,
    normalize_table_id,
)
from millpond.spec.suites import check_suite  # light: JSON only, no GX
from millpond.spec.syntax import TABLE_ID, ddl_columns, did_you_mean

# A `tables:` entry's fields (name -> required).
TABLE_FIELDS = {
    "from": True,
    "description": False,
    "columns": False,
    "transform": False,
    "watermark": False,
    "dedup": False,
    "aggregate": False,
    "order_by": False,
    "output_mode": False,
    "trigger": False,
    "rate_limit": False,
    "keys": False,
    "expectations": False,
    "sink": False,
    "join": False,
    "stateful": False,
    "lookup": False,
    "freshness": False,
    "cdc": False,
}


def table_from(check: SpecCheck, table_id: str, raw: Any) -> Table | None:
    where = f"tables.{table_id}"
    spec = fields(check, where, raw, TABLE_FIELDS)
    if not TABLE_ID.match(table_id):
        check.problem(
            where,
            f"{table_id!r} is not '<layer>.<name>'",
            f"name tables <layer>.<lower_snake_name> with layer in {', '.join(LAYERS)}",
        )
        return None
    if not spec:
        return None
    layer, name = table_id.split(".")
    mode = str(spec.get("output_mode", "append"))
    if mode not in OUTPUT_MODES:
        modes = ", ".join(OUTPUT_MODES)
        check.problem(f"{where}.output_mode", f"unknown output mode {mode!r}", f"use one of {modes}")
    changes = cdc(check, f"{where}.cdc", spec.get("cdc"))
    keys = columns(check, f"{where}.keys", spec.get("keys"))
    table = Table(
        layer=layer,
        name=name,
        source=normalize_table_id(str(spec.get("from", ""))),
        description=str(spec.get("description", "")),
        column_comments=column_descriptions(check, f"{where}.columns", spec.get("columns")),
        transform=transform(check, f"{where}.transform", spec.get("transform")),
        watermark=watermark(check, f"{where}.watermark", spec.get("watermark")),
        dedup_keys=columns(
            check,
            f"{where}.dedup.keys",
            (fields(check, f"{where}.dedup", spec["dedup"], {"keys": True}).get("keys") if "dedup" in spec else None),
        ),
        aggregate=aggregate(check, f"{where}.aggregate", spec.get("aggregate")),
        order_by=columns(check, f"{where}.order_by", spec.get("order_by")),
        output_mode=mode,
        trigger=trigger(check, f"{where}.trigger", spec.get("trigger", "availableNow")),
        rate_limit=rate_limit(check, f"{where}.rate_limit", spec.get("rate_limit")),
        keys=keys or (changes.keys if changes else ()),
        expectations=str(spec["expectations"]) if spec.get("expectations") else None,
        sink=sink(check, f"{where}.sink", spec.get("sink")),
        join=join(check, f"{where}.join", spec.get("join")),
        stateful=stateful(check, f"{where}.stateful", spec.get("stateful")),
        lookup=lookup(check, f"{where}.lookup", spec.get("lookup")),
        freshness=freshness(check, f"{where}.freshness", spec.get("freshness")),
        cdc=changes,
    )
    table_rules(check, where, table)
    if changes and keys and keys != changes.keys:
        check.problem(f"{where}.keys", f"{list(keys)} differ from cdc.keys {list(changes.keys)}", "drop keys")
    return table


def table_rules(check: SpecCheck, where: str, table: Table) -> None:
    """What a table's parts must agree on, each part's own rules run where the table has that part."""
    streaming_rules(check, where, table)
    if table.lookup and table.reads_source:
        check.problem(
            f"{where}.lookup",
            "a table reading landing files or Kafka ingests them as they are (with quarantine)",
            f"look the dimension up in a table with 'from: {table.id}'",
        )
    if table.join:
        join_rules(check, where, table)
    if table.stateful:
        stateful_rules(check, where, table)
    if table.cdc:
        cdc_rules(check, where, table)
    if table.sink.is_file:
        file_sink_rules(check, where, table)
    if table.sink.is_kafka:
        kafka_sink_rules(check, where, table)
    if table.expectations:
        suite_rules(check, where, table)
    if table.column_comments and not table.sink.is_delta:
        check.problem(
            f"{where}.columns",
            f"a {table.sink.format} sink has no table schema to keep column descriptions in",
            "describe the columns of a Delta table",
        )
    if table.freshness and not table.sink.is_delta:
        check.problem(
            f"{where}.freshness",
            f"a {table.sink.format} sink has no Delta log to tell the table's age from",
            "put the goal on a Delta table",
        )


def suite_rules(check: SpecCheck, where: str, table: Table) -> None:
    """The suite follows the naming scheme, gates a table that can hold rows back, and is well-formed."""
    expected = f"{check.path.stem}.{table.id}"
    if table.expectations != expected:
        check.problem(
            f"{where}.expectations",
            f"suite {table.expectations!r} breaks the naming scheme",
            f"name it {expected!r} (expectations/{expected}.json)",
        )
    if table.reads_source:
        check.problem(
            f"{where}.expectations",
            "a table reading landing files or Kafka cannot be gated",
            "put the suite on the table that reads it",
        )
    check.problems.extend(check_suite(str(table.expectations)))


def cdc_upstream_rules(check: SpecCheck, tables: dict[str, Table], table: Table) -> None:
    """A table applying a change feed updates and deletes its rows in place; a stream of its appended rows (how a
    table reads another) would skip those commits, so only a CDC table reading its change feed (`change_feed: true`)
    may read one. That feed, in turn, is read only from an SCD 1 table, on its keys (docs/cdc.md)."""
    reads_feed = table.reads_change_feed(table.source)
    for read in table.upstreams:
        if read in tables and tables[read].cdc and read != table.id and not (reads_feed and read == table.source):
            field = "from" if read == table.source else "join.with"
            read_table = tables[read]
            could_apply_feed = field == "from" and not (table.aggregate or table.join or table.stateful)
            keys = list(read_table.keys)
            fixes = (
                f"apply its change data feed in a table with 'cdc: {{change_feed: true, keys: {keys}}}'"
                if could_apply_feed and change_feed_refusal(read_table) is None
                else "",
                "" if read_table.reads_delta_source else f"read {read_table.source} (the events {read} applies)",
                f"query {read} in batch",
            )
            check.problem(
                f"tables.{table.id}.{field}",
                f"{read} applies a change feed: its rows are updated and deleted in place, and a stream of it "
                "would skip those commits",
                ", or ".join(fix for fix in fixes if fix),
            )
    upstream = tables.get(table.source)
    if reads_feed and upstream is not None:
        why = change_feed_refusal(upstream)
        if why:
            check.problem(
                f"tables.{table.id}.cdc.change_feed",
                f"{upstream.id} {why}",
                "read the change feed of an SCD 1 table (a `cdc:` table with scd_type 1), or drop change_feed",
            )
        elif table.cdc and {k.lower() for k in table.cdc.keys} != {k.lower() for k in upstream.keys}:
            check.problem(
                f"tables.{table.id}.cdc.keys",
                f"{list(table.cdc.keys)} are not the keys of {upstream.id}, {list(upstream.keys)}: an update of "
                "another key column would leave the old row behind, and two rows of one key in one commit clash",
                f"use keys: {list(upstream.keys)}",
            )


def change_feed_refusal(upstream: Table) -> str | None:
    """Why a table's change data feed cannot be applied as at most one event per key and commit, or None: only an
    SCD 1 table's MERGE touches each key at most once per commit and never holds a null key."""
    if upstream.cdc and upstream.cdc.scd_type == 1:
        return None
    if upstream.cdc:
        return "keeps one row per version (SCD 2): its feed has several rows of one key in one commit"
    if upstream.output_mode == "complete":
        return "is rewritten whole by each batch: its feed would say every row was deleted and inserted again"
    if upstream.merges:
        return (
            "is MERGEd from an aggregate or stateful function, whose batch may hold several rows or a null in its "
            "keys (not supported yet)"
        )
    return "only appends rows: its change feed holds nothing its rows do not (read it without change_feed)"


def delta_source_rules(check: SpecCheck, sources: dict[str, Source], tables: dict[str, Table]) -> None:
    """A Delta source is a table millpond does not write: not one of this pipeline's, nor its own bookkeeping."""
    own = {table.id.replace(".", "/"): table.id for table in tables.values()}
    own |= {f"{path}_quarantine": f"{table_id}'s quarantine" for path, table_id in list(own.items())}
    for source in sources.values():
        if not isinstance(source, DeltaSource):
            continue
        if source.path in own:
            check.problem(
                f"sources.{source.name}.path",
                f"{source.path} is {own[source.path]}, a table of this pipeline",
                f"read it by its id: from: {own[source.path]}, cdc: {{change_feed: true, keys: [...]}}",
            )
        elif any(part.startswith("_") for part in source.path.split("/")):
            check.problem(
                f"sources.{source.name}.path",
                f"{source.path} is millpond's or Delta's own bookkeeping (a folder named _...), not a table",
                "give the folder of a Delta table",
            )


def bronze_columns(source: Source, table: Table) -> list[str] | None:
    """A bronze table's columns, from its source's schema and what bronze adds (millpond.spec.model), or None where
    they are only known once its writer makes them (`schema_drift: add`, a transform) or it reads no landing
    source."""
    if not isinstance(source, (FileSource, KafkaSource)) or source.schema_drift == "add" or table.transform:
        return None
    if isinstance(source, KafkaSource):
        added = [*KAFKA_COLUMNS, RESCUED_COLUMN]
    else:
        added = [SOURCE_FILE_COLUMN, *([RESCUED_COLUMN] if source.format == "json" else [])]
    return [*ddl_columns(source.schema), *added, INGESTED_AT_COLUMN]


def described_columns_rules(check: SpecCheck, source: Source | None, table: Table) -> None:
    """A bronze table's columns are known before Spark starts: a description of any other column is a typo. Other
    tables' columns are checked when the run plans them, before any write (the writer's own, after it)."""
    known = bronze_columns(source, table) if table.column_comments and source is not None else None
    if not known:
        return
    lowered = {k.lower() for k in known}
    for name, _ in table.column_comments:
        if name.lower() not in lowered:
            check.problem(
                f"tables.{table.id}.columns.{name}",
                f"{table.id} has no column {name!r} (its columns: {', '.join(known)})",
                "describe one of its columns, or add it to the source's schema" + did_you_mean(name, known),
            )


def upstream_rules(check: SpecCheck, sources: dict[str, Source], tables: dict[str, Table], table: Table) -> None:
    """What a table's join, lookup and column descriptions must agree on with what it reads."""
    join_upstream_rules(check, sources, tables, table)
    lookup_upstream_rules(check, sources, tables, table)
    described_columns_rules(check, sources.get(table.source), table)


def dependency_order(check: SpecCheck, sources: dict[str, Source], tables: dict[str, Table]) -> dict[str, Table]:
    delta_source_rules(check, sources, tables)
    for table in tables.values():
        upstream_rules(check, sources, tables, table)
        source = sources.get(table.source)
        if isinstance(source, FileSource) and source.static:
            check.problem(
                f"tables.{table.id}.from",
                f"{table.source} is a static source (a dimension, read whole each run), not a stream",
                f"read a streaming source, and look {table.source} up with "
                f"'lookup: {{with: {table.source}, using: [...]}}'",
            )
        if isinstance(source, DeltaSource) and not table.reads_change_feed(table.source):
            check.problem(
                f"tables.{table.id}.from",
                f"{table.source} is a Delta table another job writes: millpond streams only its change data feed, "
                "into a table applying it (its updates and deletes are commits a stream of rows would fail on)",
                f"add 'cdc: {{keys: [...], change_feed: true}}' to {table.id}, or declare sources.{source.name} "
                f"'static: true' and look it up as a dimension (landing.{source.name})",
            )
        known = table.source in sources or table.source in tables
        if table.source and not known:
            names = ", ".join([*sources, *tables])
            check.problem(
                f"tables.{table.id}.from", f"unknown source or table {table.source!r}", f"read one of: {names}"
            )
        if table.source == table.id:
            check.problem(f"tables.{table.id}.from", "a table cannot read itself", "read an upstream table")
        cdc_upstream_rules(check, tables, table)
        upstream = tables.get(table.source)
        if upstream is not None and not upstream.sink.is_delta and upstream is not table:
            what = (
                f"sends its rows to Kafka topic {upstream.sink.topic}"
                if upstream.sink.is_kafka
                else f"writes {upstream.sink.format} files"
            )
            check.problem(
                f"tables.{table.id}.from",
                f"{table.source} {what}, and tables read their upstream as a Delta stream",
                f"read {upstream.source} instead (the table {table.source} reads), or drop {table.source}'s 'sink:'",
            )
    ordered: dict[str, Table] = {}
    visiting: list[str] = []

    def visit(table_id: str) -> None:
        if table_id in ordered or table_id not in tables:
            return
        if table_id in visiting:
            cycle = " -> ".join([*visiting[visiting.index(table_id) :], table_id])
            check.problem(f"tables.{table_id}.from", f"tables form a cycle: {cycle}", "make one table read upstream")
            return
        visiting.append(table_id)
        for upstream in tables[table_id].upstreams:
            visit(upstream)
        visiting.pop()
        ordered[table_id] = tables[table_id]

    for table_id in tables:
        visit(table_id)
    return ordered
