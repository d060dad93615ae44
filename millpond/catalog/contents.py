"""What the catalog holds, derived from the specs and the lake alone: every table a pipeline has written, by
`<layer>.<name>`, its quarantine as `<layer>.<name>_quarantine`, and millpond's own tables in `millpond_system`.

No Spark here: `millpond catalog sync` applies this list (millpond.catalog.sync), and a test reads it to know what to
expect. The lake stays the source of truth: a name is an external table at the lake path, so dropping the catalog
loses nothing and `catalog sync` rebuilds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from millpond.lake import paths
from millpond.lake.paths import LakePath
from millpond.spec import Pipeline

SYSTEM_SCHEMA = "millpond_system"

# millpond's own Delta tables under `_system`: catalog name -> (folder, comment).
SYSTEM_TABLES = {
    "event_log": (
        "event_log",
        "One row per table per run: outcome, rows in, written and quarantined, versions, backlog.",
    ),
    "gate_results": (
        "validation_results",
        "One row per expectation per validated batch: success, unexpected and element counts, the report's path.",
    ),
    "query_progress": ("query_progress", "One row per micro-batch of every streaming query a run started."),
    "freshness": ("freshness", "Each change of a table's freshness status (fresh, late, recovered)."),
    "lineage": ("lineage", "The OpenLineage events each run sent, as rows."),
}

# Views over the system tables, by name: (comment, query). Their text names tables by catalog name only.
SYSTEM_VIEWS = {
    "runs": (
        "One row per table per run, as the run summaries and the Airflow task log give them.",
        "SELECT run_id, pipeline, `table`, layer, trigger, data_interval_start, data_interval_end, started_at, "
        "ended_at, outcome, rows_in, rows_written, rows_quarantined, version_before, version_after, full_refresh, "
        f"error FROM {SYSTEM_SCHEMA}.event_log",
    ),
}


@dataclass(frozen=True)
class Entry:
    """One external table the catalog names."""

    schema: str
    name: str
    location: str  # as Spark reads it: a folder, or an `s3a://` URL
    comment: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class View:
    schema: str
    name: str
    comment: str
    query: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


def tables(pipelines: list[Pipeline], root: LakePath | None = None) -> list[Entry]:
    """Every table of the specs and of millpond that exists in the lake now (has a Delta log), in spec order."""
    found: list[Entry] = []
    for pipeline in pipelines:
        for table in pipeline.tables.values():
            # one line: the catalog's listing gives a comment one line (a `|` block would never compare equal)
            comment = " ".join(table.description.split()) or f"{table.layer} table of pipeline {pipeline.name}"
            found.append(Entry(table.layer, table.name, str(paths.table_path(table.id, root)), comment))
            found.append(
                Entry(
                    table.layer,
                    f"{table.name}_quarantine",
                    str(paths.quarantine_path(table.id, root)),
                    f"What {table.id} set aside, each with its reason (malformed lines, failed expectations, "
                    "keyless or clashing changes), so nothing is lost.",
                )
            )
    for name, (folder, comment) in SYSTEM_TABLES.items():
        found.append(Entry(SYSTEM_SCHEMA, name, str(paths.system_path(folder, root)), comment))
    return [entry for entry in found if is_delta_table(paths.as_lake_path(entry.location))]


def views(entries: list[Entry]) -> list[View]:
    """The system views whose tables exist."""
    present = {entry.qualified for entry in entries}
    return [
        View(SYSTEM_SCHEMA, name, comment, query)
        for name, (comment, query) in SYSTEM_VIEWS.items()
        if f"{SYSTEM_SCHEMA}.event_log" in present
    ]


def is_delta_table(path: LakePath) -> bool:
    return (path / "_delta_log").is_dir()
