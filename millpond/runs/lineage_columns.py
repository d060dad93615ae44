"""Which input columns each output column of a table comes from, read off the spec in the order the driver plans
the table (millpond.driver.plan.plan_table): source, join, lookup, transform, stateful function, dedup, aggregate.

Each step maps the columns it receives to the columns it gives, so the answer is always in terms of the datasets
the table reads (a landing folder, a topic, an upstream table, a dimension). A SQL transform and an aggregate's
measures are read by `openlineage-sql` (the parser OpenLineage's own integrations use); a Python transform or a
stateful function cannot be read, so its columns come from every column it received, INDIRECT, as OpenLineage's
column-lineage facet says of what is only known to influence a value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from millpond.lake import paths, storage
from millpond.spec import FileSource, KafkaSource, Pipeline, Table, ddl_columns, resolve_setting

# Imported inside functions: openlineage-sql's parser and sqlglot only when a run records its lineage: the DAG processor imports
# this module with the operators.

# (dataset namespace, dataset name), input column, transformation type, subtype: one entry of OpenLineage's
# `columnLineage` inputFields.
Origin = tuple[tuple[str, str], str, str, str]
Columns = dict[str, list[Origin]]  # by output column name, lower-cased (Spark resolves names case-insensitively)

IDENTITY = ("DIRECT", "IDENTITY")
TRANSFORMATION = ("DIRECT", "TRANSFORMATION")
AGGREGATION = ("DIRECT", "AGGREGATION")
OPAQUE = ("INDIRECT", "TRANSFORMATION")
GROUPED = ("INDIRECT", "GROUP_BY")
_STAR = re.compile(r"(^|[\s,])(`?\w+`?\.)?\*(\s*,|\s*from\b)", re.IGNORECASE)  # `*`, `t.*`, `` `t`.* `` in a select


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    description: str | None = None  # the column's comment in its Delta table (a spec's `columns:`)


def kafka_dataset(source: KafkaSource, topic: str) -> tuple[str, str]:
    """A topic by OpenLineage's naming: namespace `kafka://<first bootstrap server>`, name the topic."""
    return f"kafka://{resolve_setting(source.bootstrap_servers).split(',')[0].strip()}", topic


def column_lineage(
    pipeline: Pipeline,
    table: Table,
    output_columns: list[str],
    columns_of: Callable[[paths.LakePath], list[Column]],
) -> dict[str, list[Origin]]:
    """Each of `output_columns` (the table's columns as written; all the spec gives when empty) with its origins."""

    def read(upstream: str) -> Columns:
        source = pipeline.sources.get(upstream)
        if isinstance(source, KafkaSource | FileSource):
            location = paths.landing_path(source.path) if isinstance(source, FileSource) else None
            names = list(ddl_columns(source.schema)) if source.schema else []
            if isinstance(source, FileSource) and not names:  # a Delta dimension: its own schema
                names = [c.name for c in columns_of(paths.landing_path(source.path))]
            if isinstance(source, KafkaSource):
                dataset = kafka_dataset(source, source.topics[0])
            else:
                assert location is not None
                dataset = storage.lineage_name(location)
        else:  # a table of the pipeline, or another job's (a Delta source): its own schema
            location = paths.upstream_path(pipeline, upstream)
            dataset = storage.lineage_name(location)
            names = [c.name for c in columns_of(location)]
        return {name.lower(): [(dataset, name, *IDENTITY)] for name in names}

    known = Known(read(table.source))
    if table.join:  # the `from` side's column wins a shared name
        known = Known({**read(table.join.with_table), **known.columns})
    if table.lookup:
        known = Known({**read(table.lookup.dimension), **known.columns})
    if table.transform and table.transform.sql:
        known = sql_columns(table.transform.sql, known)
    elif table.transform:  # a Python function: what it gives cannot be read
        known = Known({}, known.everything(OPAQUE))
    if table.stateful:
        keys = {k.lower() for k in table.stateful.key}
        everything = known.everything(OPAQUE)
        known = Known(
            {
                name.lower(): _carry(known.of(name), IDENTITY) if name.lower() in keys else everything
                for name in table.stateful.output_columns
            }
        )
    if table.aggregate:
        known = aggregate_columns(table, known)
    return {name: known.of(name) for name in output_columns or list(known.columns)}


@dataclass(frozen=True)
class Known:
    """What one step gives: the columns it names, each with its origins, and where any other column comes from
    (`rest`: after a step that cannot be read, every column it received, INDIRECT)."""

    columns: Columns
    rest: list[Origin] = field(default_factory=list)

    def of(self, name: str) -> list[Origin]:
        return self.columns.get(name.lower()) or self.rest

    def everything(self, kind: tuple[str, str]) -> list[Origin]:
        return _all({**self.columns, "": self.rest}, kind)


def sql_columns(sql: str, known: Known) -> Known:
    """The columns a SQL transform over the view `source` gives: each listed one from the source columns it reads,
    and with `*` every source column as it was. SQL the parser cannot read, or a column it finds no input for (a
    function it does not know), comes from every column, INDIRECT: lineage never claims less than it knows."""
    from openlineage_sql import parse

    parsed = parse([sql], dialect="spark")
    if parsed is None or parsed.errors:
        return Known({}, known.everything(OPAQUE))
    given: Columns = dict(known.columns) if _STAR.search(sql) else {}
    for item in parsed.column_lineage:
        name = item.descendant.name
        reads = [_input_column(c, known) for c in item.lineage]
        kind = IDENTITY if [r.lower() for r in reads] == [name.lower()] else TRANSFORMATION
        origins = [o for read in reads for o in _carry(known.of(read), kind)]
        given[name.lower()] = origins or known.everything(OPAQUE)
    for name in _select_names(sql):  # a column the parser left out of its lineage (a function it does not know)
        given.setdefault(name.lower(), known.everything(OPAQUE))
    return Known(given, known.rest)


def _reads_a_column(expression: str) -> bool:
    import sqlglot
    from sqlglot import exp

    try:
        return sqlglot.parse_one(expression, read="spark").find(exp.Column) is not None
    except sqlglot.errors.ParseError:
        return True  # then sql_columns says what it can


def _select_names(sql: str) -> list[str]:
    """The names a query's select list gives (sqlglot, which validate already reads transforms with)."""
    import sqlglot
    from sqlglot import exp

    try:
        query = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError:
        return []
    selects = query.selects if isinstance(query, exp.Query) else []
    return [s.alias_or_name for s in selects if s.alias_or_name != "*"]


def _input_column(column: Any, known: Known) -> str:
    """The source column an expression reads: `payload.device` is the struct column `payload` (the parser takes its
    first part for a table), `source.x` and `x` the column `x`."""
    origin = getattr(column.origin, "name", None)
    if origin and origin.lower() != "source" and origin.lower() in known.columns:
        return str(origin)
    return str(column.name)


def aggregate_columns(table: Table, known: Known) -> Known:
    """The window start, the group-by keys, then each measure from the columns its expression reads (a measure that
    reads none, `count(*)`, from the keys that group it)."""
    assert table.aggregate is not None
    spec = table.aggregate
    given: Columns = {}
    keys: list[Origin] = []
    if spec.window:
        given[spec.window.alias.lower()] = _carry(known.of(spec.window.column), TRANSFORMATION)
        keys += _carry(known.of(spec.window.column), GROUPED)
    for key in spec.group_by:
        given[key.lower()] = _carry(known.of(key), IDENTITY)
        keys += _carry(known.of(key), GROUPED)
    for name, expression in spec.measures:
        if not _reads_a_column(expression):  # count(*): which rows it counts is what groups them
            given[name.lower()] = keys or known.everything(OPAQUE)
            continue
        read = sql_columns(f"SELECT {expression} AS `{name}` FROM source", known).columns.get(name.lower(), [])
        aggregated = [(*o[:2], *AGGREGATION) if o[2] == "DIRECT" else o for o in read]
        given[name.lower()] = aggregated or keys or known.everything(OPAQUE)
    return Known(given)


def _carry(origins: list[Origin], kind: tuple[str, str]) -> list[Origin]:
    """Origins passed through one more step: an identity keeps what they were, any other step is what they become."""
    return origins if kind == IDENTITY else [(*o[:2], *kind) for o in origins]


def _all(current: Columns, kind: tuple[str, str]) -> list[Origin]:
    seen: dict[tuple[tuple[str, str], str], Origin] = {}
    for origins in current.values():
        for o in origins:
            seen.setdefault((o[0], o[1]), (o[0], o[1], *kind))
    return list(seen.values())
