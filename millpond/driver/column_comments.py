"""A spec's column descriptions (`columns:`) as the comments of the Delta table's own columns.

A Delta table keeps its column comments in its schema, in its log: Spark's catalog reads them from there for a
table registered by name (the metastore holds no columns for a Delta table), so `DESCRIBE TABLE`, `millpond sql`,
a JDBC client and delta-rs all show them, and a catalog rebuilt from the lake has them back. Setting one is a
metadata-only commit (`ALTER TABLE ... ALTER COLUMN ... COMMENT`), which only a writer makes: the run that writes
the table, after its query, and only where the spec's text differs from the table's, so a run with an unchanged
spec commits nothing. A run that would start no query because nothing is new still starts Spark when a comment is
missing (a spec that gained `columns:`, a run killed before the comment's commit): `stale`, read from the log
without a JVM. A downstream stream reading the table passes over such a commit (it adds no rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from millpond.lake import lease, paths
from millpond.lake.delta_log import column_comments
from millpond.spec import Pipeline, Table

if TYPE_CHECKING:  # the idle run's check (`stale`) starts no Spark and imports none
    from pyspark.sql import SparkSession


class UnknownColumn(ValueError):
    """`columns:` names a column the table does not have: the spec's typo, named with its fix."""


def unknown_names(table: Table, columns: list[str]) -> list[str]:
    known = {c.lower() for c in columns}
    return [name for name, _ in table.column_comments if name.lower() not in known]


def unknown_message(pipeline: Pipeline, table: Table, missing: list[str], columns: list[str], outcome: str) -> str:
    return (
        f"{pipeline.spec_path}: tables.{table.id}.columns names {', '.join(map(repr, missing))}, which {table.id} "
        f"does not have (its columns: {', '.join(columns)}); {outcome}. Fix: describe its columns by their names "
        "in the table"
    )


def check_planned(pipeline: Pipeline, table: Table, columns: list[str]) -> None:
    """Before the query starts, for a table whose columns are its planned query's (no landing read, no CDC sink):
    raise UnknownColumn if a described column is not among them."""
    if missing := unknown_names(table, columns):
        raise UnknownColumn(unknown_message(pipeline, table, missing, columns, "nothing was written, rerun"))


def stale(table: Table) -> bool:
    """Whether the table exists and one of its described columns lacks the spec's text (read without a JVM)."""
    if not table.column_comments:
        return False
    current = column_comments(paths.table_path(table.id))
    return bool(current and _changes(table, current))


def commit(spark: SparkSession, pipeline: Pipeline, table: Table) -> tuple[list[str], str | None]:
    """Give the table's columns the spec's descriptions where they differ, in one commit: (the columns changed, a
    warning naming described columns the table does not have, or None). Nothing for a table not written yet."""
    path = str(paths.table_path(table.id))
    current = column_comments(path)
    if not current:  # no table yet (no batch), or a log this reader cannot read: the next run describes it
        return [], None
    missing = unknown_names(table, list(current))
    warning = unknown_message(pipeline, table, missing, list(current), "the others were described") if missing else None
    changes = _changes(table, current)
    if changes:
        clauses = ", ".join(f"{_identifier(name)} COMMENT {_string(text)}" for name, text in changes.items())
        lease.fence(pipeline.name)  # an object-store lake: still the pipeline's one writer before the commit
        spark.sql(f"ALTER TABLE delta.{_identifier(path)} ALTER COLUMN {clauses}")
    return list(changes), warning


def _changes(table: Table, current: dict[str, str | None]) -> dict[str, str]:
    """The table's own spelling of each described column it has, with the spec's text, where the two differ."""
    by_lower = {name.lower(): name for name in current}
    return {
        by_lower[name.lower()]: text
        for name, text in table.column_comments
        if name.lower() in by_lower and current[by_lower[name.lower()]] != text
    }


def _identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _string(text: str) -> str:
    """A Spark SQL string literal holding `text` as it is: backslash is the literal's escape character, and `${`
    would be Spark's variable substitution (a setting's value, or nothing, in the comment), so it is `$\\{`."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("${", "$\\{")
    return f"'{escaped}'"
