"""A spec's column descriptions (`columns:`) as the comments of the Delta table's own columns.

A Delta table keeps its column comments in its schema, in its log: Spark's catalog reads them from there for a
table registered by name (the metastore holds no columns for a Delta table), so `DESCRIBE TABLE`, `millpond sql`,
a JDBC client and delta-rs all show them, and a catalog rebuilt from the lake has them back. Setting one is a
metadata-only commit (`ALTER TABLE ... ALTER COLUMN ... COMMENT`), which only a writer makes: the run that writes
the table, after its query, and only where the spec's text differs from the table's, so a run with an unchanged
spec commits nothing. A run that would start no query because nothing is new still starts Spark when the table
lacks a description (a spec that gained `columns:`, a run killed before the comment's commit): `stale`, read from
the log without a JVM, and only when the table or the spec changed since the last run described it. A downstream
stream reading the table passes over such a commit (it adds no rows).

A described column the table does not have: a table computed from another has its planned query's columns, known
before anything is written, so such a name fails the table on every run, idle or not (`refuses_unknown`); where
the columns are the writer's (bronze, checked against its source when the spec loads; a `cdc:` table) the run
warns after the write and describes the others.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from millpond.lake import lease, paths
from millpond.lake.delta_log import column_comments
from millpond.spec import Pipeline, Table

if TYPE_CHECKING:  # the idle run's check (`stale`) starts no Spark and imports none
    from pyspark.sql import SparkSession


class UnknownColumn(ValueError):
    """`columns:` names a column the table does not have: the spec's typo, named with its fix."""


def refuses_unknown(table: Table) -> bool:
    """Whether the table's columns are its planned query's (not a landing read's writer, not a CDC sink)."""
    return not (table.reads_source or table.cdc)


def digest(table: Table) -> str:
    """What the spec describes, as the run that described the table records it (millpond.lake.checkpoints)."""
    return hashlib.sha256(json.dumps(table.column_comments).encode()).hexdigest()[:16]


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
    """Before the query starts, for a table whose columns are its planned query's: raise UnknownColumn if a
    described column is not among them."""
    if missing := unknown_names(table, columns):
        raise UnknownColumn(unknown_message(pipeline, table, missing, columns, "nothing was written, rerun"))


def stale(table: Table, version: int, recorded: dict) -> bool:
    """Whether the run must start Spark to describe the table (or to refuse its spec): it exists, and one of its
    described columns lacks the spec's text, or is missing where that fails the table. `recorded` is the table's
    record of its last finished run (millpond.lake.checkpoints.nothing_new): the log is read only when the table's
    `version` or the spec changed since a run last described it."""
    if not table.column_comments or recorded.get("described") == {"version": version, "columns": digest(table)}:
        return False
    current = column_comments(paths.table_path(table.id))
    if not current:  # no table, or a log this reader cannot read: a run that writes the table describes it
        return False
    return bool(_changes(table, current)) or (refuses_unknown(table) and bool(unknown_names(table, list(current))))


def commit(spark: SparkSession, pipeline: Pipeline, table: Table) -> tuple[list[str], str | None]:
    """Give the table's columns the spec's descriptions where they differ, in one commit: (the columns changed, a
    warning naming described columns the table does not have, or None); raises UnknownColumn instead where such a
    name fails the table. Nothing for a table not written yet."""
    path = str(paths.table_path(table.id))
    current = column_comments(path)
    if current is None:  # the log keeps its schema where the light reader does not look: Spark's reader does
        schema = spark.read.format("delta").load(path).schema
        current = {f.name: f.metadata.get("comment") for f in schema.fields}
    if not current:  # no table yet (no batch): the run that first writes it describes it
        return [], None
    warning = None
    if missing := unknown_names(table, list(current)):
        if refuses_unknown(table):
            raise UnknownColumn(unknown_message(pipeline, table, missing, list(current), "nothing was described"))
        warning = unknown_message(pipeline, table, missing, list(current), "the others were described")
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
