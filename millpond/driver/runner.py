"""Run a pipeline's tables in dependency order inside ONE Spark application.

Entry point for both `millpond run` (in-process) and `spark-submit millpond/driver/runner.py` (Airflow).
The spec is loaded and validated before the JVM starts; the pipeline lock is taken before any checkpoint is
touched. Exit codes: 0 ok, 1 a table failed, 2 invalid spec or arguments, 3 pipeline busy, 4 a data-quality
gate failed (0 with --defer-gate-failure: the Airflow quality_gate task then fails from the run summary).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from millpond.catalog.sync import name_missing, sees_catalog
from millpond.driver import column_comments, driver_jit, speedups
from millpond.lake import checkpoints, file_sink_log, lease, paths, pending_reprocess, storage
from millpond.lake.backlog import pipeline_backlog
from millpond.lake.delta_log import created_at, latest_version
from millpond.lake.lease import LeaseLost
from millpond.lake.lock import pipeline_lock
from millpond.lake.lock_errors import LakeNotWritable, PipelineBusy
from millpond.runs import event_log, lineage
from millpond.runs.run_ids import cli_run_id
from millpond.runs.run_record import RunContext, TableResult
from millpond.settings import SettingError
from millpond.spec import LAYERS, FileSource, Pipeline, SpecError, Table, environment_problems, load_pipeline
from millpond.spec.reprocess import ReprocessPlan, parse_interval, plan_reprocess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from millpond.driver.progress import ProgressListener
    from millpond.driver.streaming import TableFailed
    from millpond.driver.targets import Target

# Imported inside functions: a run with nothing new records itself without Spark (the Airflow task calls main() in its
# own process): pyspark and the modules that need it are imported only once a table runs.


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="millpond run", description=__doc__.splitlines()[0])
    parser.add_argument("pipeline", help="pipeline name (pipelines/<name>.yaml) or a spec path")
    parser.add_argument("--tables", default="", help="comma-separated table ids to run (default: all)")
    parser.add_argument("--layers", default="", help=f"comma-separated layers to run ({', '.join(LAYERS)})")
    parser.add_argument(
        "--full-refresh",
        default="",
        help="comma-separated tables to rebuild from their source (their downstream tables are rebuilt too)",
    )
    parser.add_argument(
        "--reprocess",
        default=None,
        metavar="START/END",
        help="rebuild the rows whose event time is in [START, END) in every table of the run from the landing files "
        "as they are now, after draining what is new (ISO-8601 instants, e.g. 2026-11-01T02:00:00Z/2026-11-01T03:00:00Z;"
        " `none`: no reprocess)",
    )
    parser.add_argument(
        "--allow-missing-files",
        action="store_true",
        help="with --reprocess: landing files of the interval removed since they were read are gone for good, so "
        "their rows are removed too (without it such a reprocess stops, naming the files, and changes nothing)",
    )
    parser.add_argument("--run-id", default=None, help="the orchestrator's run id (default: manual__<utc time>)")
    parser.add_argument("--trigger", default="manual", help="what started the run: manual, scheduled, backfill")
    parser.add_argument("--data-interval-start", default=None, type=_timestamp)
    parser.add_argument("--data-interval-end", default=None, type=_timestamp)
    parser.add_argument("--wait", default=0.0, type=float, help="seconds to wait for a running writer (default 0)")
    parser.add_argument("--master", default=None, help="Spark master when not under spark-submit")
    parser.add_argument(
        "--defer-gate-failure",
        action="store_true",
        help="exit 0 when the only failure is a data-quality gate (recorded as gate_failed in the "
        "run summary; the Airflow quality_gate task fails from it)",
    )
    parser.add_argument(
        "--quarantine-failures",
        default="",
        help="comma-separated gated tables: for this run only, rows failing a `fail` expectation "
        "go to the table's quarantine (with rule and run id) instead of stopping the gate",
    )
    return parser.parse_args(argv)


def _timestamp(text: str) -> datetime | None:
    """An ISO timestamp, or None for a run without a data interval (Airflow passes `none`)."""
    if not text or text.lower() == "none":
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def select_tables(pipeline: Pipeline, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(tables to run in order, tables to rebuild from scratch). Raises SpecError on unknown names."""
    chosen = set(pipeline.tables)
    if args.tables:
        chosen = {pipeline.table(t).id for t in args.tables.split(",") if t.strip()}
    if args.layers:
        layers = [layer.strip() for layer in args.layers.split(",") if layer.strip()]
        unknown = [layer for layer in layers if layer not in LAYERS]
        if unknown:
            raise SpecError([f"--layers: unknown layer(s) {unknown}; use {', '.join(LAYERS)}"])
        chosen &= {t.id for t in pipeline.tables.values() if t.layer in layers}
    refresh: list[str] = []
    if args.full_refresh:
        roots = [pipeline.table(t).id for t in args.full_refresh.split(",") if t.strip()]
        refresh = pipeline.downstream(roots)
        chosen |= set(refresh)
    gated_tables_to_quarantine(pipeline, args)  # argument errors answer before any JVM starts
    return [t for t in pipeline.tables if t in chosen], refresh


def gated_tables_to_quarantine(pipeline: Pipeline, args: argparse.Namespace) -> list[str]:
    """--quarantine-failures names gated tables only: anything else is an argument error, not a silent no-op."""
    chosen = [pipeline.table(t).id for t in (args.quarantine_failures or "").split(",") if t.strip()]
    ungated = [t for t in chosen if not pipeline.tables[t].expectations]
    if ungated:
        gated = ", ".join(t.id for t in pipeline.tables.values() if t.expectations) or "none"
        raise SpecError(
            [f"--quarantine-failures: {', '.join(ungated)} has no expectations suite (gated tables: {gated})"]
        )
    return chosen


def reset_tables(pipeline: Pipeline, table_ids: list[str]) -> None:
    """Full refresh: drop checkpoint, data and quarantine, so the table is rebuilt from its source."""
    lease.fence(pipeline.name)  # on object storage: still the pipeline's one writer before the most destructive writes
    for table_id in table_ids:
        for path in (
            paths.checkpoint_path(pipeline.name, table_id),
            paths.table_path(table_id),
            paths.quarantine_path(table_id),
            paths.changes_path(table_id),
        ):
            storage.remove_tree(path)


NEEDS_SPARK = 10  # main(..., spark_allowed=False): some table has something new; nothing was touched
ENGINE_REFUSED = 5  # SPARK_REMOTE names an engine that runs other code than this run, or none answers there


def main(argv: list[str] | None = None, spark_allowed: bool = True) -> int:
    """The run; with spark_allowed=False only a run that needs no JVM happens (else it returns NEEDS_SPARK)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        pipeline = load_pipeline(args.pipeline)
        tables, refresh = select_tables(pipeline, args)
        unset = environment_problems(pipeline, tables)  # `${KAFKA_BOOTSTRAP}`-style settings
        if unset:
            raise SpecError(unset)
        requested = requested_reprocess(pipeline, tables, args)
        driver_jit.forced_mode()  # a bad MILLPOND_DRIVER_JIT is an error before the lock and the JVM
        speedups.check_settings()
    except SpecError as exc:
        print(f"millpond: invalid spec or arguments:\n{exc}", file=sys.stderr)
        return 2
    except SettingError as exc:
        print(f"millpond: {exc}", file=sys.stderr)
        return 2
    run_id = args.run_id or cli_run_id()
    try:
        with pipeline_lock(pipeline.name, run_id, args.wait):
            try:
                plan = reprocess_plan(pipeline, tables, requested)
                code = _run_locked(pipeline, tables, refresh, args, run_id, spark_allowed, plan)
            finally:  # an engine session's queries stop before the lock is free (SIGTERM comes through here)
                if "millpond.driver.session" in sys.modules:
                    sys.modules["millpond.driver.session"].release_engine_session()
    except (PipelineBusy, LeaseLost) as exc:  # LeaseLost: another run took the lake's lease; this one stopped
        print(f"millpond: {exc}", file=sys.stderr)
        return 3
    except LakeNotWritable as exc:
        print(f"millpond: {exc}", file=sys.stderr)
        return 1
    except SettingError as exc:  # something of this run needs the lake on a folder (millpond.lake.paths.on_disk)
        print(f"millpond: {exc}", file=sys.stderr)
        return 2
    except SpecError as exc:  # an unfinished reprocess the spec, changed since, can no longer rebuild
        print(f"millpond: invalid spec or arguments:\n{exc}", file=sys.stderr)
        return 2
    return code


def requested_reprocess(pipeline: Pipeline, tables: list[str], args: argparse.Namespace) -> ReprocessPlan | None:
    """--reprocess's plan, checked before the lock and the JVM (None without it): a table that cannot be rebuilt by
    interval is a SpecError. (An interval a watermark has not closed is refused later, once the slices show whether
    it holds rows: millpond.driver.reprocess.)"""
    if not args.reprocess or args.reprocess.lower() == "none":
        if args.allow_missing_files:
            raise SpecError(["--allow-missing-files: only with --reprocess START/END (it allows removing its rows)"])
        return None
    interval = parse_interval(args.reprocess)
    if args.full_refresh:
        raise SpecError(["--reprocess and --full-refresh: choose one (a full refresh already rebuilds every interval)"])
    return replace(plan_reprocess(pipeline, tables, interval), allow_missing_files=args.allow_missing_files)


def reprocess_plan(pipeline: Pipeline, tables: list[str], requested: ReprocessPlan | None) -> ReprocessPlan | None:
    """The run's reprocess plan, decided under the pipeline's lock: the pending record (millpond.lake.pending_reprocess)
    is the lock holder's to change, so a run that queued behind another (--wait) reads it only once that run is done,
    as it left it."""
    if requested is None:
        return unfinished_reprocess(pipeline, tables)
    if not requested.slices and not set(requested.rebuilds) & pending_reprocess.owed(pipeline.name):
        # Only complete-mode tables (Airflow's gold task), none owed: the interval changed nothing upstream of them,
        # so they already equal a from-scratch computation; a plain run (maybe without a JVM) keeps them so.
        names = ", ".join(tables)
        print(f"millpond: reprocess {requested.interval.text}: no slice upstream changed; a plain run of {names}")
        return None
    return requested


def unfinished_reprocess(pipeline: Pipeline, tables: list[str]) -> ReprocessPlan | None:
    """The oldest unfinished reprocess owing some of the run's tables (millpond.lake.pending_reprocess), as a plan
    for those tables: the run finishes it before anything else. A table whose upstream outside the run still owes
    the interval waits for it (Airflow's gold task while the ingest task's reprocess is unfinished): rebuilt now, it
    would only read the upstream's old rows again."""
    for entry in pending_reprocess.pending(pipeline.name):
        waiting = set(entry["tables"]) - set(tables)  # owed by tables outside the run: their slices land later
        owed = [t for t in tables if t in entry["tables"] and not pipeline.upstream(t) & waiting]
        if owed:
            print(f"millpond: finishing the reprocess of {entry['interval']} for {', '.join(owed)} first")
            plan = plan_reprocess(pipeline, owed, parse_interval(entry["interval"]))
            return replace(plan, allow_missing_files=bool(entry.get("allow_missing_files")))
    return None


def _run_locked(
    pipeline: Pipeline,
    tables: list[str],
    refresh: list[str],
    args: argparse.Namespace,
    run_id: str,
    spark_allowed: bool,
    plan: ReprocessPlan | None = None,
) -> int:
    quarantine = tuple(gated_tables_to_quarantine(pipeline, args))
    run = RunContext(run_id, args.trigger, args.data_interval_start, args.data_interval_end, quarantine)
    idle = None if refresh or quarantine or plan else results_if_nothing_new(pipeline, tables)
    if idle is not None:
        return record_idle_run(pipeline, run, idle, args, spark_allowed)
    if not spark_allowed:
        return NEEDS_SPARK
    # Under the lock, before Spark. Not for tables rebuilt (a full refresh, a reprocess): their checkpoint goes.
    rebuilt = set(refresh) | set(plan.rebuilds if plan is not None else ())
    waiting = {t: w for t, w in backlog_by_table(pipeline, tables).items() if t not in rebuilt}
    run = replace(run, backlog=waiting)
    # Heavy imports only now: validation and lock errors above answer in well under a second.
    from millpond.driver import targets
    from millpond.driver.connect_server import EngineError
    from millpond.driver.progress import batch_rows, listening

    announce(pipeline, refresh, quarantine)
    target = targets.for_run(args.master)  # the engine (SPARK_REMOTE) if set, else a JVM of the run's own
    phases: dict[str, float] = {}
    try:
        spark = open_session(target, pipeline, run_id, tables, refresh, phases)
    except EngineError as exc:  # the engine runs other code than this run, or does not answer: nothing ran
        print(f"millpond: {exc}", file=sys.stderr)
        return ENGINE_REFUSED
    refused: list[str] = []
    with listening(spark, {paths.query_name(pipeline.name, t): t for t in tables}) as listener:
        drain = TableDrain(spark, target, pipeline, run, listener, plan)
        if plan is None:
            drain.run(tables, refresh)
        else:
            refused = reprocess(drain, plan, tables, refresh)
    phases.update({r.table: r.seconds for r in drain.results})
    for result in drain.results:
        result.backlog_files, result.backlog_bytes, result.backlog_rows, result.backlog_batches = waiting.get(
            result.table, (None, None, None, None)
        )
    code = record_run(
        pipeline, run, drain.results, phases, args, batch_rows(pipeline.name, run.run_id, listener), bool(refused)
    )
    name_in_catalog(spark, pipeline, drain.results)
    return 2 if refused else code


def name_in_catalog(spark: SparkSession, pipeline: Pipeline, results: list[TableResult]) -> None:
    """On an engine that opened the catalog, name a table or quarantine the run may have made (a new table, or rows
    set aside): a listing per schema (docs/sql.md), so a run that made nothing new pays nothing. A
    run in a JVM of its own does not open the catalog (6 to 15 s more per JVM): it says how to name a table it
    created. Never fails the run: its tables and its record are committed."""
    created = [r.table for r in results if r.version_before < 0 and r.outcome == "succeeded"]
    if not created and not any(r.rows_quarantined for r in results):
        return
    for r in results:  # a quarantine appears with the first rows set aside, maybe long after its table
        quarantine = paths.quarantine_path(r.table)
        if r.rows_quarantined and (made := created_at(quarantine)) is not None and made >= r.started_at:
            created.append(f"{r.table}_quarantine")
    try:
        if sees_catalog(spark):
            if named := name_missing(spark, [pipeline]):
                print(f"millpond: named in the catalog: {', '.join(named)}")
        elif created:
            print(
                f"millpond: {', '.join(created)} not in the catalog yet: `millpond catalog sync` names it (docs/sql.md)"
            )
    except Exception as exc:  # noqa: BLE001 - naming is a convenience here; the run itself is committed
        print(
            f"millpond: could not name the run's tables in the catalog ({exc}); `millpond catalog sync` will",
            file=sys.stderr,
        )


def backlog_by_table(pipeline: Pipeline, tables: list[str]) -> dict[str, tuple[int | None, ...]]:
    """Each table's (files, bytes, rows, batches) waiting when the run starts: files, bytes and rows summed over a
    join's two sources, batches the larger (Spark reads both in the same batches); a part not measured (rows of a
    file source, a Kafka broker that did not answer) stays None. A table downstream of another in the run reads
    what that one writes too. A backlog that cannot be read is said and left out, never a failed run."""
    try:
        found = pipeline_backlog(pipeline, tables)
    except Exception as exc:  # reported, not raised: the run reads its sources whatever this says
        print(
            f"millpond: the backlog could not be read ({type(exc).__name__}: {exc}); the run goes on", file=sys.stderr
        )
        return {}
    by_table: dict[str, tuple[int | None, ...]] = {}
    for waiting in found:
        parts: tuple[int | None, ...] = (waiting.files, waiting.bytes, waiting.rows, waiting.batches)
        before = by_table.get(waiting.table)
        if before is not None:
            summed = [None if a is None or b is None else a + b for a, b in zip(before[:3], parts[:3], strict=True)]
            batches = None if before[3] is None or parts[3] is None else max(before[3], parts[3])
            parts = (*summed, batches)
        by_table[waiting.table] = parts
    return by_table


def record_idle_run(
    pipeline: Pipeline, run: RunContext, idle: list[TableResult], args: argparse.Namespace, spark_allowed: bool
) -> int:
    """A run in which no table has anything new: its results recorded without a Spark application."""
    # An Airflow task asks in its own process (spark_allowed=False): that process's age is not this run's.
    phases = {"launch": seconds_since_launch()} if spark_allowed else {}
    phases["check_sources"] = sum(r.seconds for r in idle)
    for result in idle:  # nothing new: the stream would find nothing (checkpoints.nothing_new)
        result.backlog_files, result.backlog_bytes, result.backlog_batches = 0, 0, 0
        result.backlog_rows = None if pipeline.tables[result.table].reads_source else 0
    for result in idle:
        print(format_result(result), flush=True)
    print("millpond: no table has anything new: no Spark application started")
    for result in idle:
        if result.nothing_yet:
            print(f"millpond: {result.table}: {result.nothing_yet}; it runs once there is something to read")
    return record_run(pipeline, run, idle, phases, args)


def announce(pipeline: Pipeline, refresh: list[str], quarantine: tuple[str, ...]) -> None:
    """Say what the run does beyond draining (a full refresh, whose tables are reset now; quarantined failures)."""
    if refresh:
        roots = [t for t in refresh if not set(pipeline.tables[t].upstreams) & set(refresh)]
        extra = [t for t in refresh if t not in roots]
        print(
            f"millpond: full refresh of {', '.join(roots)}"
            + (f" also rebuilds {', '.join(extra)} (they read it as a stream)" if extra else "")
        )
        reset_tables(pipeline, refresh)
    if quarantine:
        print(
            f"millpond: this run quarantines rows failing `fail` expectations of {', '.join(quarantine)} "
            "(with rule name and run id) instead of stopping at the gate"
        )


def open_session(
    target: Target, pipeline: Pipeline, run_id: str, tables: list[str], refresh: list[str], phases: dict[str, float]
) -> SparkSession:
    """The run's session on its target, its start-up phases timed into `phases`; raises EngineError."""
    from millpond.driver.session import class_archive_in_effect, compiles_huge_methods, driver_jit_in_effect

    # Process start to here (the JVM's start under spark-submit); meaningless for a second run in one process.
    launching = target.launching
    if launching:
        phases["launch"] = seconds_since_launch()
    jit = driver_jit.choose(pipeline, tables, bool(refresh))
    started = time.perf_counter()
    spark = target.run_session(pipeline, run_id, jit.java_options)
    phases["spark_session"] = time.perf_counter() - started
    if launching:
        print(driver_jit_line(jit, driver_jit_in_effect(spark), compiles_huge_methods(spark)), flush=True)
        print(f"millpond: class archive {class_archive_in_effect(spark) or 'none'}", flush=True)
    return spark


class TableDrain:
    """Runs tables in order on one session, collecting their results: once a table fails, the later ones are
    skipped (they would read what it did not write)."""

    def __init__(
        self,
        spark: SparkSession,
        target: Target,
        pipeline: Pipeline,
        run: RunContext,
        listener: ProgressListener,
        plan: ReprocessPlan | None,
    ):
        self.spark, self.target, self.pipeline, self.run_context = spark, target, pipeline, run
        self.listener, self.plan = listener, plan
        self.results: list[TableResult] = []
        self.failed: str | None = None

    def run(self, table_ids: list[str], refresh: list[str]) -> None:
        """Drain what is new for each table; those in `refresh` are rebuilt from their sources."""
        from millpond.driver.streaming import TableFailed, run_table

        pipeline = self.pipeline
        for table_id in table_ids:
            table = pipeline.tables[table_id]
            if self.failed:
                if table_id != self.failed:
                    self.results.append(skipped_result(table, self.failed))
                continue
            waiting = nothing_to_read(pipeline, table)
            if waiting:  # asked again here: an upstream table of this run may just have written its first version
                self.results.append(nothing_yet_result(table, waiting))
                print(format_result(self.results[-1]), flush=True)
                continue
            try:
                result = run_table(
                    self.spark, self.target, pipeline, table, self.run_context, table_id in refresh, self.listener
                )
            except TableFailed as exc:
                self.failed = table_id
                result = failed_result(pipeline, table, exc)
            if self.plan and table_id in refresh:
                result.reprocess_start, result.reprocess_end = self.plan.interval.start, self.plan.interval.end
                if result.outcome == "succeeded":  # rebuilt whole: right where its upstreams owe nothing
                    pending_reprocess.rebuilt(pipeline.name, table_id, pipeline.upstream(table_id))
            self.results.append(result)
            print(format_result(result), flush=True)


def reprocess(drain: TableDrain, plan: ReprocessPlan, tables: list[str], refresh: list[str]) -> list[str]:
    """Drain what is new, replace the interval's slices, then rebuild the complete-mode tables it owes; returns the
    tables whose slice was refused."""
    spark, pipeline = drain.spark, drain.pipeline
    drain.failed = landing_files_missing(spark, pipeline, plan, drain.results)  # a refusal writes nothing at all
    if not drain.failed:
        print(f"millpond: reprocess {plan.interval.text}: first, what is new", flush=True)
    drain.run([t for t in tables if t not in plan.rebuilds], refresh)
    refused: list[str] = []
    if not drain.failed:
        drain.failed, refused = reprocess_slices(spark, pipeline, plan, drain.run_context, drain.results)
    owed = pending_reprocess.owed(pipeline.name)
    rebuilds = [t for t in plan.rebuilds if t in owed]
    if rebuilds and not drain.failed:
        print(f"millpond: reprocess {plan.interval.text}: rebuilding {', '.join(rebuilds)}", flush=True)
        lease.fence(pipeline.name)
        for table_id in rebuilds:  # the table stays readable: its first batch overwrites it in one commit
            storage.remove_tree(paths.checkpoint_path(pipeline.name, table_id))
        refresh = rebuilds
    drain.run(list(plan.rebuilds), refresh)  # the others only drain: nothing upstream of them changed
    return refused


def landing_files_missing(
    spark: SparkSession, pipeline: Pipeline, plan: ReprocessPlan, results: list[TableResult]
) -> str | None:
    """The landing table whose interval files are gone without --allow-missing-files (its failed result added to
    `results`), or None (millpond.driver.reprocess.check_landing_files)."""
    from millpond.driver.reprocess import check_landing_files
    from millpond.driver.streaming import TableFailed

    try:
        check_landing_files(spark, pipeline, plan)
    except TableFailed as exc:
        results.append(failed_result(pipeline, pipeline.tables[exc.table_id], exc))
        return exc.table_id
    return None


def reprocess_slices(
    spark: SparkSession, pipeline: Pipeline, plan: ReprocessPlan, run: RunContext, results: list[TableResult]
) -> tuple[str | None, list[str]]:
    """Replace the plan's slices (millpond.driver.reprocess): (the failed table's id or None, refusals)."""
    from millpond.driver.reprocess import Refused, replace_slices
    from millpond.driver.streaming import TableFailed

    by_table = {r.table: r for r in results}
    failed: str | None = None
    refused: list[str] = []
    try:
        replace_slices(spark, pipeline, plan, run, by_table)
    except TableFailed as exc:
        result = failed_result(pipeline, pipeline.tables[exc.table_id], exc)
        by_table[exc.table_id] = result
        failed = exc.table_id
    except Refused as exc:
        refused, failed = exc.problems, "the reprocess's refusal"
        print("millpond: reprocess refused:\n" + "\n".join(refused), file=sys.stderr)
    for result in by_table.values():
        if result not in results:
            results.append(result)
    for result in results:
        if result.table in plan.slices and not refused:
            print(format_result(result), flush=True)
    return failed, refused


def skipped_result(table: Table, failed: str) -> TableResult:
    now = datetime.now(UTC)
    return TableResult(
        table.id, table.layer, now, ended_at=now, outcome="skipped", error=f"upstream run stopped at {failed}"
    )


def failed_result(pipeline: Pipeline, table: Table, exc: TableFailed) -> TableResult:
    """The failed table's result (the exception's, or a new one), its error printed as the user acts on it."""
    result = exc.result or TableResult(
        table.id, table.layer, datetime.now(UTC), ended_at=datetime.now(UTC), outcome="failed", error=str(exc)
    )
    gate_failed = result.outcome == "gate_failed"
    print(f"millpond: {gate_failure_text(pipeline, result) if gate_failed else exc}", file=sys.stderr)
    return result


def driver_jit_for(argv: list[str]) -> driver_jit.DriverJit:
    """The JIT a run with these arguments should start its driver JVM with (Airflow's task asks before spark-submit)."""
    args = parse_args(argv)
    pipeline = load_pipeline(args.pipeline)
    tables, refresh = select_tables(pipeline, args)
    return driver_jit.choose(pipeline, tables, bool(refresh))


def driver_jit_line(chosen: driver_jit.DriverJit, in_effect: str, huge_methods: bool) -> str:
    """What the driver JVM actually runs with (read from the JVM), and why when it is what this run chose."""
    name = {"quick": "quick (C1 only", "full": "full (tiered C1 + C2"}[in_effect]
    name += ", methods of any size)" if huge_methods else ", no method over 8,000 bytes)"
    asked = "full" if chosen.mode == "off" else chosen.mode  # off: HotSpot's default tiered JIT, no option
    why = chosen.reason if asked == in_effect else "set by the JVM's launcher, not by this run"
    return f"millpond: driver JIT {name}: {why}"


def nothing_to_read(pipeline: Pipeline, table: Table) -> str | None:
    """Why the table has nothing to read yet, or None: its landing folder is missing or holds no file, or its
    upstream table (or a side of its join) has no version yet.

    Such a table is not started: Spark would fail on the missing path (`PATH_NOT_FOUND`, a Delta table that is not
    one), and waiting loses nothing, since the table's checkpoint has not read anything of what is to come.
    A Kafka topic is not asked (that takes a Kafka client, i.e. the JVM): its query runs and finds what it finds.
    A missing lookup dimension is not a wait but an error naming the path (streaming.py): its stream has rows, and
    joining them with no dimension would write them unattributed.
    """
    if table.reads_kafka:
        return None
    if table.reads_landing:
        why = _nothing_landed(pipeline, table.source)
        if why:
            return why
    elif table.reads_delta_source:  # another job's table: it may not be written yet
        location = paths.upstream_path(pipeline, table.source)
        if latest_version(location) < 0:
            return f"{table.source} has no Delta table at {location} yet"
    else:
        for upstream in table.upstreams:
            if upstream in pipeline.tables and file_sink_log.table_version(pipeline.tables[upstream]) < 0:
                return f"{upstream} has no data yet"
    return None


def _nothing_landed(pipeline: Pipeline, source_id: str) -> str | None:
    source = pipeline.sources[source_id]
    assert isinstance(source, FileSource)  # the spec loader keys landing sources `landing.<name>`
    relative = source.path
    root = paths.landing_path(relative)
    if storage.listing(root):
        return None
    return f"nothing has landed in {relative} yet" + ("" if root.is_dir() else f" (no folder {root})")


def nothing_yet_result(table: Table, why: str) -> TableResult:
    now = datetime.now(UTC)
    version = file_sink_log.table_version(table)
    return TableResult(
        table.id,
        table.layer,
        now,
        ended_at=now,
        version_before=version,
        version_after=version,
        outcome="succeeded",
        nothing_yet=why,
    )


def results_if_nothing_new(pipeline: Pipeline, tables: list[str]) -> list[TableResult] | None:
    """Every table's result when none has anything new since its last finished run (or nothing to read at all yet),
    else None.

    Decided from file listings, the Delta logs and the checkpoints (no JVM), in dependency order: nothing is
    written, so each upstream version read here is the one its downstream table's last run read. A checkpoint
    problem is left to the Spark path, which reports it per table as usual.
    """
    results = []
    for table_id in tables:
        table, started = pipeline.tables[table_id], datetime.now(UTC)
        try:
            waiting = nothing_to_read(pipeline, table)
        except OSError:
            return None
        if waiting:
            results.append(nothing_yet_result(table, waiting))
            continue
        try:
            checkpoints.verify(pipeline, table)
            previous = checkpoints.nothing_new(pipeline, table, checkpoints.input_fingerprint(pipeline, table))
            version = file_sink_log.table_version(table)
            if previous is not None and column_comments.stale(table, version, previous):
                previous = None  # the Spark path describes the table's columns (or refuses its spec)
        except (checkpoints.CheckpointProblem, OSError, ValueError):
            return None
        if previous is None:
            return None
        results.append(
            TableResult(
                table_id,
                table.layer,
                started,
                ended_at=datetime.now(UTC),
                version_before=version,
                version_after=version,
                outcome="succeeded",
                input_unchanged=True,
                state_rows=int(previous.get("state_rows", 0)),
            )
        )
    return results


def record_run(
    pipeline: Pipeline,
    run: RunContext,
    results: list[TableResult],
    phases: dict[str, float],
    args: argparse.Namespace,
    batches: list[dict] | None = None,
    refused: bool = False,
) -> int:
    """Event log, query progress and run summary, then the exit code: the tables are committed (or not) already."""
    failed = next((r.table for r in results if r.outcome in ("failed", "gate_failed")), None)
    gate_failed = any(r.outcome == "gate_failed" for r in results)
    started = time.perf_counter()
    try:
        event_log.append(pipeline.name, run, results)
        event_log.append_progress(batches or [])
        summary = event_log.write_run_summary(pipeline.name, run, results)
        phases["event_log"] = time.perf_counter() - started
        started = time.perf_counter()
        lineage.record(pipeline, run, results)  # never raises: the tables and the event log are committed
        phases["lineage"] = time.perf_counter() - started
        print("millpond: phases " + " ".join(f"{name}={seconds:.2f}s" for name, seconds in phases.items()))
    except LeaseLost:
        raise
    except Exception as exc:  # say so instead of a traceback
        print(
            f"millpond: run {run.run_id}: could not record the run in {paths.event_log_path()}: "
            f"{str(exc).strip().splitlines()[0][:500]}. The tables are as reported above; rerun once the lake is "
            "writable.",
            file=sys.stderr,
        )
        return 1
    outcome = (
        "FAILED at " + failed
        if failed
        else "drained what was new; its reprocess was REFUSED"
        if refused
        else "succeeded"
    )
    print(f"millpond: run {run.run_id} {outcome}; summary {summary}")
    for result in results:
        if result.gate:
            print(
                f"millpond: gate {result.gate['suite']} on {result.table}: {result.gate['outcome']}; report "
                f"{result.gate['report_path']}; all gate runs {result.gate['index_path']}"
            )
    if not failed:
        return 0
    if gate_failed and args.defer_gate_failure:
        print(
            f"millpond: gate failure of {failed} deferred (--defer-gate-failure): the quality gate task fails "
            "from the run summary"
        )
        return 0
    return 4 if gate_failed else 1


def seconds_since_launch() -> float:
    """Seconds since this application started: its JVM's start under spark-submit (the JVM launches Python)."""
    import psutil

    parent = psutil.Process().parent()
    pid = parent.pid if parent and parent.name().startswith("java") else os.getpid()
    try:  # ticks since boot against /proc/uptime: psutil's create_time rounds the boot time to whole seconds
        start_ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):  # not Linux
        return max(0.0, time.time() - psutil.Process(pid).create_time())


def gate_failure_text(pipeline: Pipeline, result: TableResult) -> str:
    """The message a user acts on: suite, each failed expectation with its count, the report, the way out."""
    gate = result.gate
    assert gate is not None  # a gated table's result
    lines = [
        f"data-quality gate FAILED for {result.table} (suite {gate['suite']}); nothing of the failing batch "
        f"was written, so {result.table} and its downstream tables are unchanged."
    ]
    for f in gate["failed_expectations"]:
        lines.append(
            f"  expectation {f['expectation']} [{f['severity']}]: {f['unexpected_count']} unexpected rows "
            f"(batch {f['batch_id']})"
        )
    lines.append(f"  report: {gate['report_path']}")
    lines.append(f"  all gate runs: {gate['index_path']}")
    lines.append(
        f"  way out: fix the data or the rule (expectations/{gate['suite']}.json) and rerun; or set the "
        f"failing rows aside: millpond run {pipeline.name} --quarantine-failures {result.table}"
    )
    return "\n".join(lines)


def format_result(r: TableResult) -> str:
    return (
        f"{r.table:<28} {r.outcome:<9} batches={r.micro_batches} in={r.rows_in} written={r.rows_written} "
        f"quarantined={r.rows_quarantined} late_dropped={r.rows_dropped_by_watermark} "
        f"version={r.version_before}->{r.version_after} {r.seconds:.1f}s  {paths.table_path(r.table)}"
        + ("  (nothing new since its last run: query not started)" if r.input_unchanged else "")
        + (f"  ({r.nothing_yet}: query not started)" if r.nothing_yet else "")
    )


def dump_stacks_on_sigusr1() -> None:
    """`kill -USR1 <pid>` of a run that seems stuck prints where each of its Python threads is, to stderr (the task
    log under Airflow), and the run goes on. Set by the run's own process only, not by a process calling main()."""
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)


if __name__ == "__main__":
    dump_stacks_on_sigusr1()
    sys.exit(main())
