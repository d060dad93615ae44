"""Loading a spec file: YAML in, a validated `Pipeline` out (or one SpecError listing every problem)."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from millpond import settings
from millpond.spec.errors import SpecError
from millpond.spec.loader.fields import SpecCheck, boolean, count, fields
from millpond.spec.loader.sources import delta_source, file_source, kafka_source
from millpond.spec.loader.tables import dependency_order, table_from
from millpond.spec.model import DELTA, GLOB_CHARACTERS, GLOB_SHOWN, KAFKA, SCHEDULE_PRESETS, Pipeline, Source, Table
from millpond.spec.reprocess import rewritten_event_times
from millpond.spec.syntax import NAME

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: DAG parsing reads every spec


def spec_path_for(pipeline: str) -> Path:
    return settings.pipelines_dir() / f"{pipeline}.yaml"


def all_spec_paths() -> list[Path]:
    return sorted(settings.pipelines_dir().glob("*.yaml"))


def load_pipeline(name_or_path: str | Path, lake_root: Path | None = None) -> Pipeline:
    """Load and validate one spec; raise SpecError listing every problem."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = spec_path_for(str(name_or_path))
    if not path.exists():
        known = ", ".join(p.stem for p in all_spec_paths()) or "none"
        raise SpecError([f"{path}: no such pipeline spec (pipelines in {settings.pipelines_dir()}: {known})"])
    try:
        raw = yaml.load(path.read_text(), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise SpecError([f"{path}: not valid YAML: {exc}"]) from None
    return pipeline_from(SpecCheck(path, lake_root or _lake_root_to_check()), raw)


def _lake_root_to_check() -> Path:
    """The root the spec's lake paths are checked against: an object-store lake `s3a://bucket/prefix` as the
    folder `/bucket/prefix` (the checks only compare names)."""
    url = settings.lake_url()
    return Path("/", url.split("://", 1)[1]) if url else settings.lake_root()


def validate_all(lake_root: Path | None = None) -> tuple[list[Pipeline], list[str]]:
    """Load every spec; also reject two pipelines that write the same table (they would share its path)."""
    pipelines: list[Pipeline] = []
    problems: list[str] = []
    owners: dict[str, str] = {}  # table id -> the pipeline writing it
    for path in all_spec_paths():
        try:
            pipeline = load_pipeline(path, lake_root)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        pipelines.append(pipeline)
        for table_id in pipeline.tables:
            if table_id in owners:
                problems.append(
                    f"{path}: tables.{table_id}: also written by pipeline {owners[table_id]!r}. "
                    "Fix: give one of them another table name"
                )
            owners[table_id] = pipeline.name
    return pipelines, problems


# A spec's top-level fields (name -> required).
PIPELINE_FIELDS = {
    "pipeline": True,
    "description": False,
    "schedule": True,
    "reprocess_schedule": False,
    "start_date": True,
    "catchup": False,
    "retries": False,
    "tags": False,
    "owner": False,
    "shuffle_partitions": False,
    "sources": False,
    "tables": True,
}


def pipeline_from(check: SpecCheck, raw: Any) -> Pipeline:
    top = fields(check, "", raw, PIPELINE_FIELDS)
    name = str(top.get("pipeline", check.path.stem))
    lake_root_characters(check)
    if not NAME.match(name):
        check.problem("pipeline", f"{name!r} is not a valid name", "use lower_snake_case (it becomes the DAG id)")
    elif name != check.path.stem:
        check.problem("pipeline", f"name {name!r} differs from the file name", f"rename the file to {name}.yaml")
    sources = sources_from(check, top.get("sources") or {})
    tables = tables_from(check, top.get("tables") or {})
    ordered = dependency_order(check, sources, tables)
    pipeline = Pipeline(
        name=name,
        spec_path=check.path,
        schedule=schedule(check, top.get("schedule")),
        reprocess_schedule=reprocess_schedule(check, top.get("reprocess_schedule"), sources),
        start_date=start_date(check, top.get("start_date")),
        description=str(top.get("description", "")),
        catchup=boolean(check, "catchup", top.get("catchup", False)),
        retries=count(check, "retries", top.get("retries", 2), minimum=0),
        tags=tags(check, top.get("tags")),
        owner=str(top.get("owner", "millpond")),
        shuffle_partitions=count(check, "shuffle_partitions", top.get("shuffle_partitions", 2), minimum=1),
        sources=sources,
        tables=ordered,
    )
    for where, message, fix in rewritten_event_times(pipeline):
        check.problem(where, message, fix)
    if check.problems:
        raise SpecError(check.problems)
    return pipeline


def sources_from(check: SpecCheck, raw_sources: Any) -> dict[str, Source]:
    """The `sources:` mapping, each source read by its kind's loader, keyed by id (`landing.<name>`, ...)."""
    sources: dict[str, Source] = {}
    if not isinstance(raw_sources, dict):
        check.problem("sources", "expected a mapping of source name -> source", "see docs/spec.md")
        return sources
    for source_name, raw_source in raw_sources.items():
        kind = raw_source.get("format") if isinstance(raw_source, dict) else None
        if kind == DELTA and raw_source.get("static", False) is not False:
            kind = None  # a dimension (`static: true`), read whole: the file source loader checks it
        loader = {KAFKA: kafka_source, DELTA: delta_source}.get(str(kind), file_source)
        source = loader(check, str(source_name), raw_source)
        if source:
            sources[source.id] = source
    return sources


def tables_from(check: SpecCheck, raw_tables: Any) -> dict[str, Table]:
    """The `tables:` mapping (at least one table), each read by table_from, keyed by id."""
    tables: dict[str, Table] = {}
    if not isinstance(raw_tables, dict) or not raw_tables:
        check.problem("tables", "a pipeline needs at least one table", "add a 'tables:' mapping")
        return tables
    for table_id, raw_table in raw_tables.items():
        table = table_from(check, str(table_id), raw_table)
        if table:
            tables[table.id] = table
    return tables


def tags(check: SpecCheck, raw: Any) -> tuple[str, ...]:
    """Airflow's DAG tags: a list of words (`tags: 0` or `tags: nightly` would otherwise crash or split letters)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(t, str | int | float) for t in raw):
        check.problem("tags", f"expected a list of tags, got {raw!r}", "write e.g. tags: [sales, hourly]")
        return ()
    return tuple(str(t) for t in raw)


def schedule(check: SpecCheck, value: Any) -> str:
    text = str(value or "").strip()
    if text in SCHEDULE_PRESETS or len(text.split()) == 5:
        return text
    check.problem("schedule", f"{text!r} is not a schedule", "use a 5-field cron ('0 * * * *') or @hourly/@daily")
    return text


def reprocess_schedule(check: SpecCheck, value: Any, sources: dict[str, Any]) -> str | None:
    """The schedule of a second DAG with the same tasks, for backfills at a coarser grain (docs/reprocess.md)."""
    if value is None:
        return None
    text = str(value).strip()
    if not (text in SCHEDULE_PRESETS or len(text.split()) == 5) or text == "@once":
        check.problem("reprocess_schedule", f"{text!r} is not a schedule", "use a 5-field cron ('0 0 * * *') or @daily")
    if not any(getattr(s, "event_time", None) for s in sources.values()):
        check.problem(
            "reprocess_schedule",
            "no source declares an event_time, so there is nothing to reprocess by interval",
            "add 'event_time: <a TIMESTAMP column>' to the landing source",
        )
    return text


def start_date(check: SpecCheck, value: Any) -> date:
    if isinstance(value, date):
        return value
    try:
        return datetime.strptime(str(value), "%Y-%m-%d").date()
    except ValueError:
        check.problem("start_date", f"{value!r} is not a date", "use a fixed date like 2026-11-01 (never 'now')")
        return date(2026, 1, 1)


def lake_root_characters(check: SpecCheck) -> None:
    """The lake root (MILLPOND_LAKE) is part of every path Spark reads: a glob character there reads another
    folder (seen: a root `lake[1]` ingested `lake1`'s files), and delta-rs cannot open a path with `[`."""
    if odd := " ".join(sorted(GLOB_CHARACTERS & set(str(check.lake_root)))):
        check.problem(
            "lake root",
            f"{check.lake_root} holds {odd}, which Spark's file source reads as a glob "
            "pattern (it would read another folder's files)",
            f"move the lake to a folder whose path has none of {GLOB_SHOWN} and set MILLPOND_LAKE to it",
        )
