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
from dataclasses import dataclass

from millpond.lake import paths, storage
from millpond.spec import FileSource, KafkaSource, Pipeline, Table, ddl_columns, resolve_setting

# Imported inside functions: openlineage-sql's parser only when a run records its lineage: the DAG processor imports
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
_STAR = re.compile(r"(^|[\s,])(\w+\.)?\*(\s*,|\s+from\b)", re.IGNORECASE)  # `*` or `t.*` in a select list


@dataclass(frozen=True)
class Column:
    name: str
    type: str


def dataset_name(location: paths.LakePath) -> tuple[str, str]:
    """(namespace, name) by OpenLineage's dataset naming (millpond.lake.storage.lineage_name)."""
    return storage.lineage_name(location)


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
                dataset = dataset_name(location)
        else:
            dataset = dataset_name(paths.table_path(upstream))
            names = [c.name for c in columns_of(paths.table_path(upstream))]
        return {name.lower(): [(dataset, name, *IDENTITY)] for name in names}

    current = read(table.source)
    if table.join:
        current = {**read(table.join.with_table), **current}  # the `from` side's column wins a shared name
    if table.lookup:
        current = {**read(table.lookup.dimension), **current}
    opaque = False
    if table.transform and table.transform.sql:
        current = sql_columns(table.transform.sql, current)
    elif table.transform:
        opaque = True
    if table.stateful:
        keys = {k.lower() for k in table.stateful.key}
        everything = _all(current, OPAQUE)
        current = {
            name.lower(): (_carry(current.get(name.lower(), []), IDENTITY) if name.lower() in keys else everything)
            for name in table.stateful.output_columns
        }
        opaque = False
    if table.aggregate:
        current = aggregate_columns(table, current)
        opaque = False
    names = output_columns or list(current)
    everything = _all(current, OPAQUE)
    return {
        name: current.get(name.lower()) or (everything if opaque else current.get(name.lower(), [])) for name in names
    }


def sql_columns(sql: str, current: Columns) -> Columns:
    """The columns a SQL transform over the view `source` gives: each listed one from the source columns it reads,
    and with `*` every source column as it was."""
    from openlineage_sql import parse

    parsed = parse([sql], dialect="spark")
    given: Columns = dict(current) if _STAR.search(sql) else {}
    for item in parsed.column_lineage if parsed else []:
        name = item.descendant.name
        reads = [c.name.lower() for c in item.lineage]
        kind = IDENTITY if reads == [name.lower()] else TRANSFORMATION
        given[name.lower()] = [o for read in reads for o in _carry(current.get(read, []), kind)]
    return given


def aggregate_columns(table: Table, current: Columns) -> Columns:
    """The window start, the group-by keys, then each measure from the columns its expression reads (a measure that
    reads none, `count(*)`, from the keys that group it)."""
    assert table.aggregate is not None
    spec = table.aggregate
    given: Columns = {}
    keys: list[Origin] = []
    if spec.window:
        given[spec.window.alias.lower()] = _carry(current.get(spec.window.column.lower(), []), TRANSFORMATION)
        keys += _carry(current.get(spec.window.column.lower(), []), GROUPED)
    for key in spec.group_by:
        given[key.lower()] = _carry(current.get(key.lower(), []), IDENTITY)
        keys += _carry(current.get(key.lower(), []), GROUPED)
    for name, expression in spec.measures:
        read = sql_columns(f"SELECT {expression} AS `{name}` FROM source", current).get(name.lower(), [])
        given[name.lower()] = [(*o[:2], *AGGREGATION) for o in read] or keys or _all(current, OPAQUE)
    return given


def _carry(origins: list[Origin], kind: tuple[str, str]) -> list[Origin]:
    """Origins passed through one more step: an identity keeps what they were, any other step is what they become."""
    return origins if kind == IDENTITY else [(*o[:2], *kind) for o in origins]


def _all(current: Columns, kind: tuple[str, str]) -> list[Origin]:
    seen: dict[tuple[tuple[str, str], str], Origin] = {}
    for origins in current.values():
        for o in origins:
            seen.setdefault((o[0], o[1]), (o[0], o[1], *kind))
    return list(seen.values())
