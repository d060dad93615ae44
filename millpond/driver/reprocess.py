"""Replace an event-time interval's rows in a pipeline's tables with what the landing files hold now.

The runner calls this between draining what is new (the standard streaming path, so a file added for the interval
is read once, by the stream, and logged as seen) and rebuilding the complete-mode tables (a full refresh from a new
checkpoint, reading the upstream's snapshot). Here, in dependency order:

1. every slice is computed and materialised: a landing table's from the files its stream has logged as read (those
   of the interval's layout folders, or all of them), parsed exactly as the stream parses, each file of the interval
   replaced whole; a downstream table's from its upstream's rows of the interval, and of the other intervals where
   those files' rows changed, as they will be (kept rows plus the new slice), through the same plan (transform,
   dedup) and the same gate;
2. a blocking gate failure stops here: nothing is written;
3. each table gets ONE Delta commit replacing its slice (`replaceWhere`), and its quarantine one more.

The live streams reading a table skip these commits (see _replace): a downstream table's own slice is replaced by
this run, and reading the change again would count it twice. A rerun after a crash recomputes the same slices
from the same files and replaces them again, under the same Delta transaction (Txn): a commit the crashed run still
made (the engine finishes a write whose client was killed) is skipped by Delta, so no append form lands twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from millpond.driver import sources
from millpond.driver.faults import inject_fault
from millpond.driver.plan import apply_transform, plan_table
from millpond.driver.streaming import TableFailed, gate_message
from millpond.lake import checkpoints, lease, paths, pending_reprocess, storage
from millpond.lake.delta_log import latest_version as delta_version
from millpond.lake.paths import LakePath
from millpond.lake.system_tables import open_table
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import DeltaSource, FileSource, Pipeline, Table
from millpond.spec.model import INGESTED_AT_COLUMN
from millpond.spec.reprocess import Interval, ReprocessPlan, layout_folders, parse_interval, transform_verdict

# Imported inside functions: the gate (and Great Expectations behind it) only for a gated table.

# The reprocess's commits, as Delta's history shows them (`userMetadata`).
COMMIT_NOTE = "millpond reprocess {interval} run {run_id}"
# Delta's idempotent-write app id of an interval's reprocess commits (its version: pending_reprocess.begin).
TXN_APP_ID = "millpond-reprocess:{interval}"


def _committed_txn(path: LakePath, app_id: str) -> int:
    """The table's committed transaction version for the app id, from its log by delta-rs (-1: none, or a log
    delta-rs cannot read, where the version falls back to the clock)."""
    try:
        table = open_table(path)
        version = table.transaction_version(app_id) if table is not None else None
    except Exception:  # an unreadable log only loses the clock-skew guard; the commit itself checks again
        return -1
    return -1 if version is None else int(version)


@dataclass(frozen=True)
class Txn:
    """Delta's `txnAppId`/`txnVersion` of one reprocess's commits: a second commit of the same slice (a crashed
    run's write the engine finished, then the rerun's) is skipped by Delta, so an append form cannot land twice."""

    app_id: str
    version: int


class Refused(RuntimeError):
    """The slices cannot be rebuilt as asked (an interval a stateful table's watermark has not closed and that holds
    rows, or a transform changing the event time): nothing was replaced."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class Slice:
    """One table's new rows for the interval, what they replace, and its quarantine's part."""

    table: Table
    rows: DataFrame
    condition: str  # replaceWhere of the table: the rows this slice replaces
    quarantine: DataFrame | None = None
    quarantine_condition: str | None = None  # None: the quarantine is replaced whole
    files_read: int = 0
    # The intervals whose rows the tables downstream rebuild: the one asked, and those where the re-read files' rows
    # changed (a re-delivered file's corrected event times may move a row into or out of another interval).
    intervals: tuple[Interval, ...] = ()


def replace_slices(
    spark: SparkSession, pipeline: Pipeline, plan: ReprocessPlan, run: RunContext, results: dict[str, TableResult]
) -> None:
    """Compute, validate, then commit every slice of the plan; `results` (by table id) get the counts.

    Raises TableFailed naming the table: before any commit when a slice cannot be computed or its gate blocks.
    """
    interval = plan.interval
    recorded = tuple(parse_interval(text) for text in pending_reprocess.other_intervals(pipeline.name, interval.text))
    slices: dict[str, Slice] = {}
    for table_id, column in plan.slices.items():
        table = pipeline.tables[table_id]
        result = results.setdefault(table_id, TableResult(table_id, table.layer, datetime.now(UTC)))
        result.reprocess_start, result.reprocess_end = interval.start, interval.end
        try:
            if table.reads_landing:
                piece = landing_slice(spark, pipeline, plan, table, column, run, recorded)
            else:
                upstream = slices.get(table.source)
                intervals = upstream.intervals if upstream else _merged((interval, *recorded))
                piece = derived_slice(spark, pipeline, table, column, interval, intervals, upstream)
                refusals = checkpoints.open_intervals(pipeline, plan, _reach(intervals))
                if piece and table_id in refusals and _holds_rows(spark, piece):
                    raise Refused([refusals[table_id]])
                piece = gated(spark, pipeline, piece, run, result) if piece else None
        except (TableFailed, Refused):
            raise
        except Exception as exc:  # a Spark error reading or planning the slice: name the table, nothing written
            result.outcome, result.error = "failed", f"reprocess of {interval.text}: {_first_line(exc)}"
            result.ended_at = datetime.now(UTC)
            raise TableFailed(table_id, result.error, result) from exc
        if piece is None:  # nothing was ever written or read: nothing to replace
            result.rows_replaced = result.rows_replaced or 0
            continue
        slices[table_id] = piece
    changing = {t: p for t, p in slices.items() if _changes(spark, p)}
    for table_id in slices.keys() - changing.keys():
        results[table_id].rows_replaced = results[table_id].rows_replaced or 0
        print(f"millpond: {table_id}: reprocessed {interval.text}: nothing to replace, before or after", flush=True)
    if not changing:
        return
    rebuilt = _merged((interval, *recorded, *(i for piece in changing.values() for i in piece.intervals)))
    refusals = checkpoints.open_intervals(pipeline, plan, _reach(rebuilt))
    unclosed = [why for table_id, why in refusals.items() if table_id not in plan.slices]
    if unclosed:  # a stateful table outside this run reads a replaced table: its live state holds the interval
        raise Refused(unclosed)
    # Owed: each changing slice, and every table reading one (its stream skips the replacement).
    lease.fence(pipeline.name)  # on object storage: still the pipeline's one writer (commit() checks each table)
    app_id = TXN_APP_ID.format(interval=interval.text)
    committed = {t: _committed_txn(paths.table_path(t), app_id) for t in changing}
    owed = pipeline.downstream(list(changing))
    others = [i.text for i in rebuilt if i != interval]
    versions = pending_reprocess.begin(
        pipeline.name, interval.text, owed, committed, plan.allow_missing_files, other_intervals=others
    )
    for table_id, piece in changing.items():
        commit(spark, pipeline.name, piece, interval, run, results[table_id], Txn(app_id, versions[table_id]))
        pending_reprocess.done(pipeline.name, interval.text, table_id)
    for table_id in plan.slices:  # a slice that did not change is as the reprocess wants it too
        pending_reprocess.done(pipeline.name, interval.text, table_id)


def _merged(intervals: tuple[Interval, ...] | list[Interval]) -> tuple[Interval, ...]:
    """The distinct intervals in time order."""
    return tuple(sorted(set(intervals), key=lambda i: (i.start, i.end)))


def _reach(intervals: tuple[Interval, ...]) -> datetime | None:
    return max((i.end for i in intervals), default=None)


def covering_sql(intervals: tuple[Interval, ...], column: str, with_nulls: bool) -> str:
    """The rows of any of the intervals (adjacent ones merged), and with `with_nulls` the rows with no event time."""
    spans: list[list[datetime]] = []
    for piece in _merged(intervals):
        if spans and piece.start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], piece.end)
        else:
            spans.append([piece.start, piece.end])
    terms = [f"({Interval(start, end).sql(column)})" for start, end in spans] or ["false"]
    if with_nulls:
        terms.append(f"`{column}` IS NULL")
    return "(" + " OR ".join(terms) + ")"


def check_landing_files(spark: SparkSession, pipeline: Pipeline, plan: ReprocessPlan) -> None:
    """Before the run drains anything: every landing slice's files are there, or the user allowed their loss.

    Raises TableFailed naming the table, the interval and the files, so a refused reprocess writes nothing at all
    (not even what is new). Without --allow-missing-files, a file gone from landing whose rows the slice would
    replace stops the run; all of an interval's files gone stops it in any case (FilesGone).
    """
    for table_id, column in plan.slices.items():
        table = pipeline.tables[table_id]
        if not table.reads_landing:
            continue
        try:
            root, folders = _landing_folders(pipeline, plan, table)
            _, gone = interval_files(checkpoints.seen_files(pipeline, table), root, folders)
            lost = _rows_held_from(spark, table, plan.interval.slice_sql(column), gone, whole_files=bool(folders))
            if lost and not plan.allow_missing_files:
                _check_missing_allowed(table, plan, lost)
        except Exception as exc:  # gone files, or the store or Spark failing to list or read: named, nothing written
            result = TableResult(table_id, table.layer, datetime.now(UTC), ended_at=datetime.now(UTC))
            result.reprocess_start, result.reprocess_end = plan.interval.start, plan.interval.end
            result.outcome, result.error = "failed", f"reprocess of {plan.interval.text}: {_first_line(exc)}"
            raise TableFailed(table_id, result.error, result) from exc


def _landing_folders(pipeline: Pipeline, plan: ReprocessPlan, table: Table) -> tuple[LakePath, list[str]]:
    """The landing folder of a landing table's source, and the interval's layout folders in it ([]: no layout)."""
    source = plan.source_of(pipeline, table.id)
    assert source is not None  # plan_reprocess: a landing table
    root = paths.landing_path(source.path)
    folders = [str(root / f) + "/" for f in layout_folders(source.layout, plan.interval)] if source.layout else []
    return root, folders


def landing_slice(
    spark: SparkSession,
    pipeline: Pipeline,
    plan: ReprocessPlan,
    table: Table,
    column: str,
    run: RunContext,
    recorded: tuple[Interval, ...] = (),
) -> Slice | None:
    """A landing table's rows of the files the interval is read from, as the files are now (None: the table does
    not exist and there is nothing to read).

    The file is the unit replaced: a file of the interval (one of its layout folders', or without a layout one
    holding rows of the interval, before or after) is replaced whole, whatever event times its rows carry. A
    re-delivered file whose corrected timestamps move a row into another interval thus leaves no old row behind, in
    this interval or the other, and the slice's `intervals` name every interval where the files' rows changed,
    for the tables downstream to rebuild (`recorded`: those a crashed run of this reprocess had found)."""
    interval, source = plan.interval, plan.source_of(pipeline, table.id)
    assert source is not None  # plan_reprocess: a landing table
    root, folders = _landing_folders(pipeline, plan, table)
    present, gone = interval_files(checkpoints.seen_files(pipeline, table), root, folders)
    in_slice = interval.slice_sql(column)
    lost = _rows_held_from(spark, table, in_slice, gone, whole_files=bool(folders))
    if lost:  # checked before the drain too (check_landing_files); here for files removed since
        _check_missing_allowed(table, plan, lost)
    path = str(paths.table_path(table.id))
    read = _read_files(spark, pipeline, table, source, present, path, run)
    if read is None:
        return None
    rows, bad = read
    held = spark.read.format("delta").load(path) if delta_version(path) >= 0 else None
    old, new, rows = _replaced_files(spark, path, held is not None, rows, folders, in_slice)
    condition = _in_list(sources.SOURCE_FILE, old | new)
    before = held.where(condition) if held is not None else None
    others = _changed_intervals(before, rows, column, interval)
    if others:
        print(
            f"millpond: {table.id}: the files re-read for {interval.text} changed rows of other intervals too (moved "
            f"to or from them, or corrected); the tables downstream rebuild those as well: "
            f"{_some([i.text for i in others])}",
            flush=True,
        )
    # The quarantined lines of the files read now, and of the files gone from landing only when the user allowed
    # their removal: else they stay as they are.
    replaced = set(present) | (set(gone) if plan.allow_missing_files else set())
    if not folders and plan.allow_missing_files:  # without a layout: only the gone files the slice replaces
        replaced = set(present) | set(lost)
    quarantined = _quarantine_lines(spark, table, rows, bad, replaced)
    intervals = _merged((interval, *others, *recorded))
    files = len(present) if folders else len({paths.from_uri(name) for name in new})  # the files replaced
    return Slice(table, rows, condition, bad, quarantined, files, intervals)


def _read_files(
    spark: SparkSession,
    pipeline: Pipeline,
    table: Table,
    source: FileSource,
    present: list[str],
    path: str,
    run: RunContext,
) -> tuple[DataFrame, DataFrame | None] | None:
    """The rows and the malformed lines of the landing files read again, fixed now (files may change before the
    commit); with none left, no rows (or None when the table does not exist either)."""
    if present:
        planned = plan_table(sources.read_landing(spark, source, present), table)
        good = _shape_for_drift(spark, pipeline, table, planned.where(F.col(sources.ERROR).isNull()), path)
        dropped = {sources.RAW, sources.ERROR, sources.LINE_BUCKET, sources.NEW_FIELDS}
        now = F.lit(datetime.now(UTC)).cast("timestamp")
        rows = good.select(*[c for c in good.columns if c not in dropped], now.alias(INGESTED_AT_COLUMN))
        bad: DataFrame | None = planned.where(F.col(sources.ERROR).isNotNull()).select(
            F.col(sources.RAW).alias("raw"),
            F.col(sources.SOURCE_FILE).alias("source_file"),
            F.col(sources.ERROR).alias("reason"),
            F.lit("parse").alias("rule"),
            F.lit(run.run_id).alias("run_id"),
            now.alias("quarantined_at"),
        )
    elif delta_version(path) >= 0:
        rows, bad = spark.read.format("delta").load(path).limit(0), None
    else:
        return None
    return rows.localCheckpoint(eager=True), bad.localCheckpoint(eager=True) if bad is not None else None


def _replaced_files(
    spark: SparkSession, path: str, exists: bool, rows: DataFrame, folders: list[str], in_slice: str
) -> tuple[set[str], set[str], DataFrame]:
    """The files replaced whole: (as the table stores their names, which the replaceWhere must match; as this read
    wrote them, which the new rows carry; the new rows of those files), each compared by its path."""
    if folders:  # the layout's folders of the interval: every file the table holds from them, and every file read
        stored = _stored_files(spark, path, sources.SOURCE_FILE) if exists else {}
        old = {name for name, file in stored.items() if file.startswith(tuple(folders))}
        return old, _names(rows, sources.SOURCE_FILE), rows
    # Every landing file was read: those holding rows of the interval, before or after, each by its path.
    of_slice = _stored_files(spark, path, sources.SOURCE_FILE, F.expr(in_slice)) if exists else {}
    read_of_slice = _names(rows.where(F.expr(in_slice)), sources.SOURCE_FILE)
    wanted = set(of_slice.values()) | {paths.from_uri(name) for name in read_of_slice}
    stored = _stored_files(spark, path, sources.SOURCE_FILE) if exists else {}
    old = {name for name, file in stored.items() if file in wanted}
    new = {name for name in _names(rows, sources.SOURCE_FILE) if paths.from_uri(name) in wanted}
    return old, new, rows.where(F.expr(_in_list(sources.SOURCE_FILE, new)))


def _quarantine_lines(
    spark: SparkSession, table: Table, rows: DataFrame, bad: DataFrame | None, replaced: set[str]
) -> str:
    """The condition on the quarantine's lines the slice replaces: those of the files read now (a malformed line
    belongs to its file, not to an interval), and those of the `replaced` files gone from landing."""
    quarantine = str(paths.quarantine_path(table.id))
    read_now = _names(rows, sources.SOURCE_FILE) | (_names(bad, "source_file") if bad is not None else set())
    lines = _stored_files(spark, quarantine, "source_file") if delta_version(quarantine) >= 0 else {}
    kept = {name for name, file in lines.items() if file in replaced}
    return _in_list("source_file", kept | read_now)


def _changed_intervals(before: DataFrame | None, after: DataFrame, column: str, interval: Interval) -> list[Interval]:
    """The intervals other than `interval` (of its length, on its grid) where the replaced files' rows differ before
    and after: where a correction moved a row to or from, or changed one. A file's unchanged rows of the next hour
    (a file spanning the hour's end) ask nothing of that hour, which silver's watermark may still hold open."""
    ignored = {sources.SOURCE_FILE, INGESTED_AT_COLUMN}  # as stored vs as read now: not the row's content
    shared = [c for c in after.columns if c not in ignored and (before is None or c in before.columns)]

    def as_text(frame: DataFrame) -> DataFrame:  # to_json: set operations refuse map columns
        return frame.select(F.col(column), F.to_json(F.struct(*shared)).alias("_row"))

    changed = as_text(after)
    if before is not None:
        changed = as_text(before).exceptAll(changed).unionByName(changed.exceptAll(as_text(before)))
    return _other_intervals(changed, column, interval)


def _other_intervals(frame: DataFrame, column: str, interval: Interval) -> list[Interval]:
    """The intervals of the interval's length, on its grid, holding rows of the frame outside it."""
    step = interval.end - interval.start
    micros = step // timedelta(microseconds=1)
    origin = (interval.start - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    since = f"(unix_micros(`{column}`) - {origin})"
    index = F.expr(f"({since} - pmod({since}, {micros})) div {micros}").alias("k")  # exact floor, no double
    outside = F.col(column).isNotNull() & ~F.expr(interval.sql(column))
    found = {int(r[0]) for r in frame.where(outside).select(index).distinct().collect()}
    return [Interval(interval.start + k * step, interval.start + (k + 1) * step) for k in sorted(found)]


class FilesGone(RuntimeError):
    """The stream's log names files of the interval and the store returns none of them: a slice read from nothing
    would replace the interval's rows with nothing."""


class FilesMissing(RuntimeError):
    """Some files the interval's rows came from are no longer in landing: their rows would be deleted with the
    slice, and a source that expired is no reason to delete data unless the user says so."""


def interval_files(seen: list[str], root: LakePath, folders: list[str]) -> tuple[list[str], list[str]]:
    """(present, gone): of the files the stream logged as read (`seen`, URIs as Spark wrote them) that lie in the
    interval's layout folders (all of them without a layout), those the landing folder holds now, as Spark reads them
    (local paths, or `s3a://` URLs on the store: one listing per folder, no request per file), and those it does not.

    If the log names files and NONE of them is found (the store unreachable as configured, the files moved, a wrong
    mapping of names), FilesGone names them: replacing the interval's rows with nothing would lose them silently.
    Some of them gone is for the caller to weigh (their rows, if any, would go with the slice).
    """
    wanted = sorted({f for f in map(paths.from_uri, seen) if not folders or f.startswith(tuple(folders))})
    present = storage.present(wanted, [paths.as_lake_path(folder) for folder in folders] or [root])
    if wanted and not present:
        raise FilesGone(
            f"the stream logged {len(wanted)} file(s) of the interval as read and {root} holds none of them now: "
            f"{_some(wanted)}. Nothing was replaced. Fix: check that MILLPOND_LAKE (and on object storage the AWS_* "
            "variables) reach those files; if they were all removed on purpose, rebuild with --full-refresh"
        )
    kept = set(present)
    return present, [f for f in wanted if f not in kept]


def _rows_held_from(
    spark: SparkSession, table: Table, condition: str, gone: list[str], whole_files: bool = False
) -> dict[str, int]:
    """Of the files gone from landing, those whose rows the slice would delete, with their counts: every row of a
    gone file holding rows matching `condition` (the slice replaces files whole), or with `whole_files` (the
    interval's layout folders) every row of every gone file. (Their quarantined lines are left alone unless the
    removal is allowed: landing_slice.)"""
    path = paths.table_path(table.id)
    if not gone or delta_version(path) < 0:
        return {}
    missing, held = set(gone), dict[str, int]()
    frame = spark.read.format("delta").load(str(path))
    matching = F.sum(F.when(F.expr(condition), 1).otherwise(0))
    for name, rows, of_slice in frame.groupBy(sources.SOURCE_FILE).agg(F.count("*"), matching).collect():
        file = paths.from_uri(name) if name else None
        if file is not None and file in missing and (whole_files or of_slice):
            held[file] = held.get(file, 0) + rows
    return held


def _check_missing_allowed(table: Table, plan: ReprocessPlan, lost: dict[str, int]) -> None:
    """Stop (FilesMissing, one line naming the files) unless the run allows removing their rows; then say it does."""
    names = _some(sorted(lost))
    rows = sum(lost.values())
    if not plan.allow_missing_files:
        raise FilesMissing(
            f"{len(lost)} file(s) that {table.id} holds {rows} row(s) of {plan.interval.text} from are no longer in "
            f"landing: {names}. Nothing was replaced. Fix: restore them, or rerun with --reprocess and "
            "--allow-missing-files to remove their rows from the interval"
        )
    print(
        f"millpond: {table.id}: reprocess of {plan.interval.text} removes the {rows} row(s) of {len(lost)} file(s) "
        f"no longer in landing, and their quarantined lines (--allow-missing-files): {names}",
        flush=True,
    )


def _some(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def derived_slice(
    spark: SparkSession,
    pipeline: Pipeline,
    table: Table,
    column: str,
    interval: Interval,
    intervals: tuple[Interval, ...],
    upstream: Slice | None,
) -> Slice | None:
    """The rows of `intervals` (the one asked, and those the re-read files moved rows into or out of) of a table
    downstream of a slice: the upstream's rows of them as they will be after its commit, through the table's own plan
    (transform, dedup: batch semantics of the same operators; dedup keys hold the event time, so each key's rows lie
    in one interval)."""
    # A stateful table's rows without event time are left as its stream wrote them: the watermark never closes
    # them, so its live state still holds their keys (docs/reprocess.md).
    condition = covering_sql(intervals, column, with_nulls=not table.is_stateful)
    rows_of_interval = F.expr(condition)
    if delta_version(paths.table_path(table.source)) < 0 or delta_version(paths.table_path(table.id)) < 0:
        return None  # the upstream has no rows yet, or this table was never written: its next run reads them all
    before = spark.read.format("delta").load(str(paths.table_path(table.source))).where(rows_of_interval)
    if upstream is not None:
        kept = before.where(~F.coalesce(F.expr(upstream.condition), F.lit(False)))  # a null event time: kept
        before = kept.unionByName(upstream.rows.where(rows_of_interval), allowMissingColumns=True)
    _check_event_time_kept(table, column, interval, condition, before)
    rows = plan_table(before, table).where(rows_of_interval)
    return Slice(table, rows.localCheckpoint(eager=True), condition, intervals=intervals)


# The event time as the upstream holds it, carried through a transform the spec cannot show keeps it.
_AS_READ = "__millpond_event_time_as_read"


def _check_event_time_kept(table: Table, column: str, interval: Interval, condition: str, before: DataFrame) -> None:
    """Refuse a slice whose transform changes the event time it slices by (Refused, nothing written).

    A SQL transform is followed at `millpond validate` (millpond.spec.event_time); a function's code, or SQL that
    could not be followed, is checked here on the interval's rows: with the column's value carried alongside, every
    row must come out with the value it went in with (if the function drops the extra column, every row must still
    lie in the interval). A transform that moved rows across the interval's bounds would make the slice delete rows
    it never rebuilds."""
    verdict = transform_verdict(table, column)
    if not table.transform or (verdict is not None and verdict.outcome != "unknown"):
        return
    out = apply_transform(before.withColumn(_AS_READ, F.col(column)), table.transform)
    if _AS_READ in out.columns:
        moved = out.where(~F.col(column).eqNullSafe(F.col(_AS_READ))).select(_AS_READ, column)
    else:
        moved = out.where(~F.expr(condition)).select(F.lit(None).alias(_AS_READ), column)
    seen = moved.limit(3).collect()
    if seen:
        shown = ", ".join(f"{was} -> {now}" if was is not None else f"{now}" for was, now in seen)
        what = table.transform.function or (verdict.detail if verdict else "")
        raise Refused(
            [
                f"{table.id}: its transform ({what}) changes the event-time column {column} of rows of "
                f"{interval.text} (e.g. {shown}), so a reprocess would delete rows it never rebuilds. Nothing was "
                f"replaced. Fix: keep {column} as it is read and write the new value to a column of another name, "
                f"or rebuild with --full-refresh {table.id}"
            ]
        )


def gated(spark: SparkSession, pipeline: Pipeline, piece: Slice, run: RunContext, result: TableResult) -> Slice:
    """The table's suite on the whole new slice: a blocking failure raises before anything of the run is
    written; rows of `drop` rules (and of `fail` ones under --quarantine-failures) go to the quarantine."""
    if not piece.table.expectations:
        return piece
    if piece.rows.isEmpty():  # nothing to validate; rows set aside for the interval before are replaced by none
        return Slice(
            piece.table, piece.rows, piece.condition, *_empty_quarantine(spark, piece), intervals=piece.intervals
        )
    from millpond.driver.quality import Gate

    quarantines = piece.table.id in run.quarantine_failures
    gate = Gate(spark, pipeline.name, piece.table, run.run_id, quarantine_failures=quarantines, mode="reprocess")
    report = gate.validate(piece.rows, 0)
    if report.blocking:
        gate.publish(report)
        result.record_gate(report)
        result.outcome, result.ended_at = "gate_failed", datetime.now(UTC)
        result.error = gate_message(piece.table, result)
        raise TableFailed(piece.table.id, result.error, result)
    good, bad = gate.split(piece.rows, report)
    if bad is not None:
        bad = bad.localCheckpoint(eager=True)
        report.rows_dropped = bad.count()
    gate.publish(report)
    result.record_gate(report)
    empty, condition = _empty_quarantine(spark, piece)
    rows = good.localCheckpoint(eager=True)
    return Slice(piece.table, rows, piece.condition, bad or empty, condition, intervals=piece.intervals)


def _empty_quarantine(spark: SparkSession, piece: Slice) -> tuple[DataFrame | None, str]:
    """No set-aside rows (None when the table has no quarantine yet), and which quarantine rows are the interval's:
    a set-aside row keeps the table's row as JSON in `raw`, so its event time is read from there."""
    quarantine = paths.quarantine_path(piece.table.id)
    empty = spark.read.format("delta").load(str(quarantine)).limit(0) if delta_version(quarantine) >= 0 else None
    column = piece.condition.split("`")[1]
    raw_time = f"CAST(get_json_object(raw, '$.{column}') AS TIMESTAMP)"  # the column as the schema spells it
    return empty, piece.condition.replace(f"`{column}`", raw_time)


def commit(
    spark: SparkSession,
    pipeline: str,
    piece: Slice,
    interval: Interval,
    run: RunContext,
    result: TableResult,
    txn: Txn,
) -> None:
    """One commit replacing the table's slice, then one replacing its quarantine's part (if it has one), each
    under the reprocess's Delta transaction (a commit already made under it is skipped)."""
    table_id = piece.table.id
    path, quarantine = paths.table_path(table_id), paths.quarantine_path(table_id)
    note = COMMIT_NOTE.format(interval=interval.text, run_id=run.run_id)
    replaced = spark.read.format("delta").load(str(path)).where(piece.condition).count()
    written = piece.rows.count()
    inject_fault(table_id, "before_replace")
    lease.fence(pipeline)
    _replace(piece.rows, path, piece.condition, note, txn, replaces=replaced > 0)
    result.rows_replaced = (result.rows_replaced or 0) + replaced
    result.rows_written += written
    quarantined = piece.quarantine.count() if piece.quarantine is not None else 0
    if piece.quarantine is not None and (quarantined or delta_version(quarantine) >= 0):
        inject_fault(table_id, "between_replaces")
        lease.fence(pipeline)
        result.rows_quarantined += quarantined
        _replace(piece.quarantine, quarantine, piece.quarantine_condition, note, txn)
    result.version_after = delta_version(path)
    result.ended_at = datetime.now(UTC)
    if result.outcome == "running":
        result.outcome = "succeeded"
    print(
        f"millpond: {table_id}: reprocessed {interval.text}: {replaced} row(s) replaced by {written}"
        + (f" from {piece.files_read} file(s)" if piece.table.reads_landing else ""),
        flush=True,
    )
    inject_fault(table_id, "after_replace")


def _replace(
    rows: DataFrame, path: LakePath, condition: str | None, note: str, txn: Txn, replaces: bool = True
) -> None:
    """One commit replacing the rows matching `condition` (all rows when None) that the live streams skip.

    Delta's streaming source reads only commits that add rows; the streams reading a sliced table use
    `skipChangeCommits` (sources.read_delta_stream), so a commit that also removes rows is skipped whole. A slice
    that replaces no row would be a pure append, which they would read: it is written with `dataChange=false`
    instead (Delta refuses that flag on a replaceWhere with data filters, so only then).
    """
    writer = (
        rows.write.format("delta")
        .option("userMetadata", note)
        .option("mergeSchema", "true")
        .option("txnAppId", txn.app_id)
        .option("txnVersion", txn.version)
    )
    if delta_version(path) < 0:
        writer.mode("append").save(str(path))  # nothing to replace, and no stream has read the table yet
    elif not replaces:
        writer.mode("append").option("dataChange", "false").save(str(path))
    elif condition is None:
        writer.mode("overwrite").save(str(path))
    else:
        writer.mode("overwrite").option("replaceWhere", condition).save(str(path))


def _changes(spark: SparkSession, piece: Slice) -> bool:
    """Whether committing the slice would change anything: rows (or quarantined lines) before or after."""
    if _holds_rows(spark, piece) or (piece.quarantine is not None and not piece.quarantine.isEmpty()):
        return True
    quarantine = paths.quarantine_path(piece.table.id)
    if piece.quarantine is None or delta_version(quarantine) < 0:
        return False
    held = spark.read.format("delta").load(str(quarantine))
    return not (held.where(piece.quarantine_condition) if piece.quarantine_condition else held).isEmpty()


def _holds_rows(spark: SparkSession, piece: Slice) -> bool:
    """Whether the interval has rows in the table, before or after the replacement."""
    if not piece.rows.isEmpty():
        return True
    return not spark.read.format("delta").load(str(paths.table_path(piece.table.id))).where(piece.condition).isEmpty()


def _shape_for_drift(spark: SparkSession, pipeline: Pipeline, table: Table, good: DataFrame, path: str) -> DataFrame:
    """The source's `schema_drift` policy, as the stream's writer applies it (sinks.landing)."""
    if sources.NEW_FIELDS not in good.columns:
        return good
    source = pipeline.sources[table.source]
    assert not isinstance(source, DeltaSource)  # drift is a landing or Kafka source's policy
    existing = spark.read.format("delta").load(path).columns if delta_version(path) >= 0 else []
    return sources.apply_schema_drift(good, source, str(pipeline.spec_path), existing)


def _stored_files(spark: SparkSession, path: str, column: str, where: object | None = None) -> dict[str, str]:
    """The distinct file names a table's rows hold (as stored, which a replaceWhere must match), each with its path
    as Spark reads it (which the landing folder and the interval's layout folders are compared with)."""
    frame = spark.read.format("delta").load(path)
    if where is not None:
        frame = frame.where(where)  # type: ignore[arg-type]
    return {r[0]: paths.from_uri(r[0]) for r in frame.select(column).distinct().collect() if r[0]}


def _names(frame: DataFrame, column: str) -> set[str]:
    """The file names a slice's rows carry, as this read wrote them (they must satisfy the replaceWhere)."""
    return {r[0] for r in frame.select(column).distinct().collect() if r[0]}


def _in_list(column: str, values: set[str]) -> str:
    if not values:
        return "false"
    quoted = ", ".join("'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'" for value in sorted(values))
    return f"`{column}` IN ({quoted})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:2000] if text else type(exc).__name__
