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


CATALOG_IMPLEMENTATION, HIVE = "spark.sql.catalogImplementation", "hive"


def sync(spark: SparkSession, pipelines: list[Pipeline], root: LakePath | None = None) -> SyncResult:
    """Every name checked: kind, location, comment (a view's text): one listing per schema."""
    return _apply(spark, pipelines, root, everything=True)


def name_missing(spark: SparkSession, pipelines: list[Pipeline]) -> list[str]:
    """What a run on the engine does after making a table: name what is missing or points at another lake (several
    lakes may share a catalog: the last to run is named); comments are `sync`'s to check."""
    result = _apply(spark, pipelines, None, everything=False)
    return result.created + result.replaced


def sees_catalog(spark: SparkSession) -> bool:
    """Whether the session's JVM opened the catalog (the engine, `millpond sql`), not the in-memory one of a run's
    own JVM."""
    return spark.conf.get(CATALOG_IMPLEMENTATION, "in-memory") == HIVE


def _apply(spark: SparkSession, pipelines: list[Pipeline], root: LakePath | None, everything: bool) -> SyncResult:
    entries = contents.tables(pipelines, root)
    views = contents.views(entries)
    result = SyncResult()
    held: dict[str, Registered] = {}
    for schema in dict.fromkeys([e.schema for e in entries] + [v.schema for v in views]):
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{schema}`")
        held |= registered_in(spark, schema)
    for entry in entries:
        _sync_table(spark, entry, held.get(entry.qualified), result, everything)
    for view in views:
        _sync_view(spark, view, held.get(view.qualified), result, everything)
    wanted = {e.qualified for e in entries} | {v.qualified for v in views}
    result.not_in_specs = [name for name in held if name not in wanted]
    return result


def _sync_table(
    spark: SparkSession, entry: Entry, current: Registered | None, result: SyncResult, everything: bool
) -> None:
    if current is not None and (current.kind, current.location) == ("EXTERNAL", entry.location):
        if current.comment == entry.comment or not everything:
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


def _sync_view(
    spark: SparkSession, view: View, current: Registered | None, result: SyncResult, everything: bool
) -> None:
    if (
        current is not None
        and current.kind == "VIEW"
        and (not everything or (current.view_text, current.comment) == (view.query, view.comment))
    ):
        result.unchanged.append(view.qualified)
        return
    if current is not None and current.kind != "VIEW":
        _drop_name(spark, view.qualified, current)
    spark.sql(f"CREATE OR REPLACE VIEW {_quoted(view.qualified)} COMMENT {_literal(view.comment)} AS {view.query}")
    (result.replaced if current is not None else result.created).append(view.qualified)


def _drop_name(spark: SparkSession, name: str, current: Registered) -> None:
    """Forget a name: only an external table (whose DROP leaves its data) or a view; anything else is refused."""
    if current.kind not in ("EXTERNAL", "VIEW"):
        raise CatalogError(
            f"{name} is a {current.kind.lower() or 'table of unknown kind'} in the catalog (at {current.location or '?'}"
            "), which a DROP could delete with its data, and millpond's table of that name lives in the lake. Fix: "
            "rename or drop that table yourself, then run `millpond catalog sync` again"
        )
    spark.sql(f"DROP {'VIEW' if current.kind == 'VIEW' else 'TABLE'} IF EXISTS {_quoted(name)}")


def registered_in(spark: SparkSession, schema: str) -> dict[str, Registered]:
    """Every name of a schema with its kind, location (as the lake names it), comment and view text. Read with SHOW
    TABLE EXTENDED, which gives the catalog's own entries without loading the tables (a Delta table whose folder
    moved away would fail to load) and each table's comment from the catalog (DESCRIBE gives a Delta table's from its
    log)."""
    found: dict[str, Registered] = {}
    for row in spark.sql(f"SHOW TABLE EXTENDED IN `{schema}` LIKE '*'").collect():
        if row["isTemporary"]:
            continue
        details: dict[str, str] = {}
        for line in str(row["information"]).splitlines():
            key, _, value = line.partition(": ")
            details.setdefault(key.strip(), value.strip())
        location = details.get("Location", "")
        found[f"{schema}.{row['tableName']}"] = Registered(
            kind=details.get("Type", "").upper(),
            location=paths.from_uri(location) if location else "",
            comment=details.get("Comment", ""),
            view_text=details.get("View Text", ""),
        )
    return found


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
