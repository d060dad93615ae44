"""A spec's column descriptions (`columns:`) as the comments of the Delta table's own columns.

A Delta table keeps its column comments in its schema, in its log: Spark's catalog reads them from there for a
table registered by name (the metastore holds no columns for a Delta table), so `DESCRIBE TABLE`, `millpond sql`,
a JDBC client and delta-rs all show them, and a catalog rebuilt from the lake has them back. Setting one is a
metadata-only commit (`ALTER TABLE ... ALTER COLUMN ... COMMENT`), which only a writer makes: the run that writes
the table, after its query, and only where the spec's text differs from the table's, so a run with an unchanged
spec commits nothing. A downstream stream reading the table passes over such a commit (it adds no rows).
"""

from __future__ import annotations

import json

from pyspark.sql import SparkSession

from millpond.lake import lease, paths
from millpond.lake.system_tables import open_table
from millpond.spec import Pipeline, Table


class UnknownColumn(ValueError):
    """`columns:` names a column the table does not have: the spec's typo, named with its fix."""


def check_names(pipeline: Pipeline, table: Table, columns: list[str], planned: bool) -> None:
    """Raise UnknownColumn if a described column is not among `columns` (the planned query's, before any write,
    or the written table's)."""
    known = {c.lower() for c in columns}
    missing = [name for name, _ in table.column_comments if name.lower() not in known]
    if missing:
        when = "nothing was written" if planned else "its rows were written, its comments were not"
        raise UnknownColumn(
            f"{pipeline.spec_path}: tables.{table.id}.columns names {', '.join(map(repr, missing))}, which "
            f"{table.id} does not have (its columns: {', '.join(columns)}); {when}. Fix: describe its columns "
            "by their names in the table, then rerun"
        )


def comments_in(path: str) -> dict[str, str | None] | None:
    """Each top-level column of the Delta table at `path` with its comment (None: none), or None for no table."""
    table = open_table(path)
    if table is None:
        return None
    fields = json.loads(table.schema().to_json())["fields"]
    return {f["name"]: (f.get("metadata") or {}).get("comment") for f in fields}


def commit(spark: SparkSession, pipeline: Pipeline, table: Table) -> list[str]:
    """Give the table's columns the spec's descriptions where they differ, in one commit; the columns changed."""
    if not table.column_comments:
        return []
    path = str(paths.table_path(table.id))
    current = comments_in(path)
    if current is None:  # the table was never written (no batch yet): its next run describes it
        return []
    check_names(pipeline, table, list(current), planned=False)
    by_lower = {name.lower(): name for name in current}
    changes = {
        by_lower[name.lower()]: text for name, text in table.column_comments if current[by_lower[name.lower()]] != text
    }
    if not changes:
        return []
    clauses = ", ".join(f"{_identifier(name)} COMMENT {_string(text)}" for name, text in changes.items())
    lease.fence(pipeline.name)  # an object-store lake: still the pipeline's one writer before the commit
    spark.sql(f"ALTER TABLE delta.{_identifier(path)} ALTER COLUMN {clauses}")
    return list(changes)


def _identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _string(text: str) -> str:
    """A Spark SQL string literal: backslash is its escape character."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
