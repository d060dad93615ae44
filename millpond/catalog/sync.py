"""Make the catalog name what the specs and the lake hold (millpond.catalog.contents), from any session that sees
the catalog (a JVM of `millpond`'s own or the engine).

Idempotent: a name already at its location with its comment is left alone, so a second sync changes nothing. A
name at another location (a moved lake) or with another comment is dropped and created again: the tables are
external, so the drop forgets the name and never touches data, and nothing here commits to a table's Delta log (an
ALTER TABLE on a Delta table would, and would race the pipeline writing it). Names in the catalog that no spec gives
are kept and reported: the catalog may hold tables millpond did not make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from millpond.catalog import contents
from millpond.catalog.contents import Entry, View
from millpond.lake import paths
from millpond.lake.paths import LakePath
from millpond.spec import Pipeline

if TYPE_CHECKING:  # annotations only: the session is built by millpond.driver.session
    from pyspark.sql import SparkSession


class CatalogError(RuntimeError):
    """The catalog holds something sync must not replace; the message names it and the fix."""


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    not_in_specs: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        said = [f"created   {name}" for name in self.created] + [f"replaced  {name}" for name in self.replaced]
        said += [f"kept (no spec names it) {name}" for name in self.not_in_specs]
        said.append(
            f"catalog: {len(self.created)} created, {len(self.replaced)} replaced, {len(self.unchanged)} unchanged"
        )
        return said


@dataclass(frozen=True)
class Registered:
    """A name as the catalog holds it now."""

    kind: str  # EXTERNAL, MANAGED or VIEW
    location: str
    comment: str
    view_text: str


def sync(spark: SparkSession, pipelines: list[Pipeline], root: LakePath | None = None) -> SyncResult:
    entries = contents.tables(pipelines, root)
    views = contents.views(entries)
    result = SyncResult()
    schemas = dict.fromkeys([e.schema for e in entries] + [v.schema for v in views])
    for schema in schemas:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{schema}`")
    for entry in entries:
        _sync_table(spark, entry, result)
    for view in views:
        _sync_view(spark, view, result)
    wanted = {e.qualified for e in entries} | {v.qualified for v in views}
    for schema in schemas:
        for row in spark.sql(f"SHOW TABLES IN `{schema}`").collect():
            name = f"{schema}.{row['tableName']}"
            if not row["isTemporary"] and name not in wanted:
                result.not_in_specs.append(name)
    return result


def name_missing(spark: SparkSession, pipelines: list[Pipeline]) -> list[str]:
    """Name what exists in the lake but not in the catalog, checking only names (one listing per schema): what a run
    on the engine does after making a table. Locations and comments are `sync`'s to check."""
    entries = contents.tables(pipelines)
    views = contents.views(entries)
    result = SyncResult()
    present: set[str] = set()
    for schema in dict.fromkeys([e.schema for e in entries] + [v.schema for v in views]):
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{schema}`")
        present |= {f"{schema}.{row['tableName']}" for row in spark.sql(f"SHOW TABLES IN `{schema}`").collect()}
    for entry in entries:
        if entry.qualified not in present:
            _sync_table(spark, entry, result)
    for view in views:
        if view.qualified not in present:
            _sync_view(spark, view, result)
    return result.created + result.replaced


def sees_catalog(spark: SparkSession) -> bool:
    """Whether the session's JVM opened the catalog (the engine, `millpond sql`), not the in-memory one of a run's
    own JVM."""
    return spark.conf.get("spark.sql.catalogImplementation", "in-memory") == "hive"


def _sync_table(spark: SparkSession, entry: Entry, result: SyncResult) -> None:
    current = registered(spark, entry.qualified)
    if current is not None and (current.kind, current.location, current.comment) == (
        "EXTERNAL",
        entry.location,
        entry.comment,
    ):
        result.unchanged.append(entry.qualified)
        return
    if current is not None:
        _drop_name(spark, entry.qualified, current)
    # IF NOT EXISTS: two runs on the engine may name the same system table at once
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {_quoted(entry.qualified)} USING DELTA LOCATION {_literal(entry.location)} "
        f"COMMENT {_literal(entry.comment)}"
    )
    (result.replaced if current is not None else result.created).append(entry.qualified)


def _sync_view(spark: SparkSession, view: View, result: SyncResult) -> None:
    current = registered(spark, view.qualified)
    if current is not None and (current.kind, current.view_text, current.comment) == ("VIEW", view.query, view.comment):
        result.unchanged.append(view.qualified)
        return
    if current is not None and current.kind != "VIEW":
        _drop_name(spark, view.qualified, current)
    spark.sql(f"CREATE OR REPLACE VIEW {_quoted(view.qualified)} COMMENT {_literal(view.comment)} AS {view.query}")
    (result.replaced if current is not None else result.created).append(view.qualified)


def _drop_name(spark: SparkSession, name: str, current: Registered) -> None:
    """Forget a name; refused for a managed table, whose DROP would delete its data."""
    if current.kind == "MANAGED":
        raise CatalogError(
            f"{name} is a managed table in the catalog (its data at {current.location} would be deleted by a DROP), "
            "and millpond's table of that name lives in the lake. Fix: rename or drop that table yourself, then "
            "run `millpond catalog sync` again"
        )
    spark.sql(f"DROP {'VIEW' if current.kind == 'VIEW' else 'TABLE'} IF EXISTS {_quoted(name)}")


def registered(spark: SparkSession, name: str) -> Registered | None:
    """The name's kind, location (as the lake names it), comment and view text, or None when it has none. Read with
    SHOW TABLE EXTENDED, which gives the catalog's own entry: DESCRIBE gives a Delta table's comment from its log."""
    schema, table = name.split(".")
    # Not catalog.tableExists: it loads the table, and a Delta table whose folder moved away fails to load.
    found = [
        row["information"]
        for row in spark.sql(f"SHOW TABLE EXTENDED IN `{schema}` LIKE {_literal(table)}").collect()
        if row["tableName"] == table
    ]
    if not found:
        return None
    details: dict[str, str] = {}
    for line in found[0].splitlines():
        key, _, value = line.partition(": ")
        details.setdefault(key.strip(), value.strip())
    location = details.get("Location", "")
    return Registered(
        kind=details.get("Type", "").upper(),
        location=paths.from_uri(location) if location else "",
        comment=details.get("Comment", ""),
        view_text=details.get("View Text", ""),
    )


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
