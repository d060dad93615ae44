"""What `millpond run --reprocess START/END` may rebuild, decided from the spec alone, before any lock or JVM.

A reprocess rebuilds the rows of an event-time interval in every table of the run from the landing files as they
are now (docs/reprocess.md). Which tables can be rebuilt that way follows from their kind:

    a bronze table reading landing files   its interval slice re-read from the files (the source's event_time)
    an append table downstream of one      its slice recomputed from its upstream's slice (dedup and gate apply)
    a complete-mode table                  rebuilt whole from its upstream, as a full refresh does
    anything else                          refused, naming the fix: its state (a join's buffer, a stateful
                                           function's groups, an append-mode window) spans intervals, or its
                                           source (Kafka) keeps no files to read again
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from millpond.spec import event_time
from millpond.spec.errors import SpecError
from millpond.spec.event_time import Verdict
from millpond.spec.model import FileSource, Pipeline, Table

# The tokens a layout may use, finest last; a folder holds the files of one step of its finest token.
LAYOUT_TOKENS = {
    "YYYY": ("%Y", timedelta(days=366)),
    "MM": ("%m", timedelta(days=28)),
    "DD": ("%d", timedelta(days=1)),
    "HH": ("%H", timedelta(hours=1)),
}
_TOKEN = re.compile("|".join(LAYOUT_TOKENS))


@dataclass(frozen=True)
class Interval:
    """[start, end) in UTC."""

    start: datetime
    end: datetime

    @property
    def text(self) -> str:
        return f"{iso(self.start)}/{iso(self.end)}"

    def sql(self, column: str) -> str:
        """The Spark SQL predicate `start <= column < end`, as Delta's replaceWhere takes it."""
        return (
            f"`{column}` >= TIMESTAMP'{self.start:%Y-%m-%d %H:%M:%S.%f}+00:00' AND "
            f"`{column}` < TIMESTAMP'{self.end:%Y-%m-%d %H:%M:%S.%f}+00:00'"
        )

    def slice_sql(self, column: str) -> str:
        """The rows a reprocess of the interval rebuilds: its event times, and rows with none (they belong to no
        interval, so each reprocess recomputes them from the files it reads)."""
        return f"({self.sql(column)} OR `{column}` IS NULL)"


def iso(moment: datetime) -> str:
    """The instant as the pending record and commit notes keep it: whole seconds as `...:00Z`, and a fraction of a
    second kept to the microsecond, so that parse_interval gives back the very same interval (a truncated
    sub-second interval would read back as empty and be refused on every later run)."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S" + (".%fZ" if utc.microsecond else "Z"))


def parse_interval(text: str) -> Interval:
    """`2026-11-01T02:00:00Z/2026-11-01T03:00:00Z` (ISO-8601 instants; a bare one is UTC) -> Interval."""
    parts = text.split("/")
    fix = "write it START/END with ISO-8601 instants, e.g. 2026-11-01T02:00:00Z/2026-11-01T03:00:00Z"
    if len(parts) != 2:
        raise SpecError([f"--reprocess {text!r}: not START/END. Fix: {fix}"])
    moments = []
    for part in parts:
        try:
            moment = datetime.fromisoformat(part.strip().replace("Z", "+00:00"))
        except ValueError:
            raise SpecError([f"--reprocess {text!r}: {part!r} is not an ISO-8601 instant. Fix: {fix}"]) from None
        moments.append(moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC))
    if moments[0] >= moments[1]:
        raise SpecError([f"--reprocess {text!r}: the start is not before the end. Fix: {fix}"])
    return Interval(moments[0], moments[1])


def layout_problem(layout: str) -> str | None:
    """Why a layout cannot map an instant to a folder, or None (tokens YYYY, MM, DD, HH; the coarser ones present)."""
    tokens = _TOKEN.findall(layout)
    if not tokens:
        return f"layout {layout!r} names no time token (YYYY, MM, DD, HH)"
    if any(part in ("", ".", "..") for part in layout.strip("/").split("/")):
        return f"layout {layout!r} has an empty, '.' or '..' folder"
    order = list(LAYOUT_TOKENS)
    finest = max(order.index(t) for t in tokens)
    missing = [t for t in order[: finest + 1] if t not in tokens]
    if missing:
        return f"layout {layout!r} has {order[finest]} but not {', '.join(missing)}: a folder would hold several days"
    return None


def layout_folders(layout: str, interval: Interval) -> list[str]:
    """The folders (relative to the landing folder) holding files of the interval, in time order."""
    tokens = _TOKEN.findall(layout)
    step = min(LAYOUT_TOKENS[t][1] for t in tokens)
    pattern = _TOKEN.sub(lambda m: LAYOUT_TOKENS[m.group(0)][0], layout.strip("/"))
    floor = interval.start.replace(minute=0, second=0, microsecond=0)
    if step >= timedelta(days=1):
        floor = floor.replace(hour=0)
    folders, moment = [], floor
    while moment < interval.end:
        folder = moment.strftime(pattern)
        if folder not in folders:
            folders.append(folder)
        moment += step if step < timedelta(days=28) else timedelta(days=1)
    return folders


@dataclass(frozen=True)
class ReprocessPlan:
    """Per table of the run: rebuilt by event-time slice (with its event-time column) or whole."""

    interval: Interval
    slices: dict[str, str]  # table id -> event-time column, dependency order
    rebuilds: tuple[str, ...]  # complete-mode tables, dependency order
    # Landing files gone since the stream read them: their rows of the interval are removed with the slice only when
    # the user says so (`--allow-missing-files`); else the run stops, naming them, before any commit.
    allow_missing_files: bool = False

    def source_of(self, pipeline: Pipeline, table_id: str) -> FileSource | None:
        table = pipeline.tables[table_id]
        source = pipeline.sources.get(table.source) if table.reads_landing else None
        return source if isinstance(source, FileSource) else None


def plan_reprocess(pipeline: Pipeline, tables: list[str], interval: Interval) -> ReprocessPlan:
    """Sort the run's tables into slices and rebuilds; raise SpecError naming every table that cannot be rebuilt."""
    problems: list[str] = []
    event_times: dict[str, str] = {}
    slices: dict[str, str] = {}
    rebuilds: list[str] = []
    refusals: dict[str, str] = {}
    for table in pipeline.tables.values():  # dependency order: an upstream's event time is known first
        column = _event_time(pipeline, table, event_times)
        verdict = transform_verdict(table, column)
        if verdict and verdict.outcome in ("rewritten", "dropped"):
            column = None
        if column:
            event_times[table.id] = column
        why = _transform_refusal(table, verdict) or _refusal(pipeline, table, column)
        if why:
            refusals[table.id] = why
        if table.id not in tables:
            continue
        if why:
            problems.append(
                f"{pipeline.spec_path}: {table.id} cannot be reprocessed: {why}. Fix: rebuild it whole with "
                f"--full-refresh {table.id}, or leave it out of the run (--tables/--layers)"
            )
        elif table.output_mode == "complete":
            rebuilds.append(table.id)
        else:
            slices[table.id] = column or ""
    for table_id in pipeline.downstream(list(slices)):
        if table_id not in tables and table_id in refusals:
            problems.append(
                f"{pipeline.spec_path}: {table_id} reads a table this reprocess replaces, and cannot be reprocessed "
                f"itself: {refusals[table_id]}. Fix: rebuild the tables whole with --full-refresh instead"
            )
    if problems:
        raise SpecError(problems)
    return ReprocessPlan(interval, slices, tuple(rebuilds))


def transform_verdict(table: Table, column: str | None) -> Verdict | None:
    """How the table's SQL transform treats the event-time column it reads (None: no SQL transform, or no such
    column). A function's code cannot be read: the reprocess checks its rows instead (reprocess.derived_slice)."""
    if not column or table.reads_landing or not table.transform or not table.transform.sql:
        return None
    return event_time.follow(table.transform.sql, column)


def rewritten_event_times(pipeline: Pipeline) -> list[tuple[str, str, str]]:
    """(where, problem, fix) for each table whose SQL transform rewrites the event-time column it carries: the spec
    is refused (`millpond validate`), as a reprocess slicing by the column would delete rows it never rebuilds."""
    problems: list[tuple[str, str, str]] = []
    known: dict[str, str] = {}
    for table in pipeline.tables.values():
        column = _event_time(pipeline, table, known)
        verdict = transform_verdict(table, column)
        if verdict and verdict.outcome == "rewritten":
            problems.append(
                (
                    f"tables.{table.id}.transform.sql",
                    f"it rewrites the event-time column {column!r} that a reprocess slices by ({verdict.detail}), so "
                    "a reprocess would delete the rows it moves out of an interval and never rebuild them",
                    f"keep {column} as it is read (SELECT *, or {column} unchanged) and write the new value to a "
                    "column of another name",
                )
            )
        elif column and not (verdict and verdict.outcome == "dropped"):
            known[table.id] = column
    return problems


def _transform_refusal(table: Table, verdict: Verdict | None) -> str | None:
    if verdict is None or verdict.outcome not in ("rewritten", "dropped"):
        return None
    does = {"rewritten": "rewrites", "dropped": "drops"}[verdict.outcome]
    return f"its SQL transform {does} the event-time column it reads ({verdict.detail})"


def _event_time(pipeline: Pipeline, table: Table, known: dict[str, str]) -> str | None:
    if table.reads_landing:
        source = pipeline.sources.get(table.source)
        return source.event_time if isinstance(source, FileSource) else None
    if table.output_mode == "complete" or table.aggregate or table.join or table.stateful or table.cdc:
        return None  # its rows are not the upstream's rows: no event-time slice to carry
    return known.get(table.source)


def _refusal(pipeline: Pipeline, table: Table, event_time: str | None) -> str | None:
    if table.reads_kafka:
        return "it reads Kafka, which keeps no files to read again"
    if not table.sink.is_delta:
        return f"its {table.sink.format} sink cannot replace a slice (only a Delta table can)"
    if table.cdc:
        return "a change feed's state (each key's newest event, an SCD 2 history) spans intervals"
    if table.join or table.stateful or table.lookup:
        return "its state (a join's buffer, a stateful function's groups or a dimension as read then) spans intervals"
    if table.output_mode == "complete":
        return None
    if table.aggregate:
        return f"its {table.output_mode}-mode aggregate's windows close with the watermark, not with the interval"
    if table.reads_landing and not event_time:
        source = table.source.split(".", 1)[1]
        return f"its source has no event time (add 'event_time: <a TIMESTAMP column>' to sources.{source})"
    if not event_time:
        return f"its upstream {table.source} has no event-time column to slice by"
    if table.dedup_keys and not table.watermark:
        return "its dedup has no watermark, so its live query keeps every key it has seen, of every interval"
    if table.dedup_keys and event_time.lower() not in {key.lower() for key in table.dedup_keys}:
        return (
            f"its dedup keys {list(table.dedup_keys)} leave out the event time {event_time!r}, so a duplicate may lie "
            "in another interval"
        )
    return None
