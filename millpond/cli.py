"""`millpond` command line: validate specs, run or preview pipelines, land sample data, show table status and\nbacklog."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import cast

from millpond import settings
from millpond.catalog import commands as catalog_commands
from millpond.lake import paths, storage
from millpond.project.scaffold import DEFAULT_PIPELINE
from millpond.spec import FileSource, KafkaSource, Pipeline, SpecError, load_pipeline, validate_all

# Imported inside functions: each command imports what it runs, so `millpond validate`, `status` and `init` start in a
# fraction of a second without pyspark, Great Expectations or Airflow.

HOUR = timedelta(hours=1)


def cmd_validate(args: argparse.Namespace) -> int:
    if args.pipeline:
        try:
            pipelines = [load_pipeline(args.pipeline)]
        except SpecError as exc:
            print(exc, file=sys.stderr)
            return 2
        problems: list[str] = []
    else:
        pipelines, problems = validate_all()
    for problem in problems:
        print(problem, file=sys.stderr)
    for pipeline in pipelines:
        print(f"ok  {pipeline.spec_path}: {len(pipeline.tables)} tables ({', '.join(pipeline.tables)})")
    if not pipelines and not problems:
        print(f"no pipeline specs in {settings.pipelines_dir()}", file=sys.stderr)
        return 2
    return 2 if problems else 0


def cmd_check(argv: list[str]) -> int:
    from millpond.driver.quality import check_main

    return check_main(argv)


def cmd_run(argv: list[str]) -> int:
    from millpond.driver.runner import dump_stacks_on_sigusr1
    from millpond.driver.runner import main as run_main

    dump_stacks_on_sigusr1()
    return run_main(argv)


def cmd_preview(argv: list[str]) -> int:
    from millpond.driver.preview import main as preview_main  # imports pyspark only once spec and table check out

    return preview_main(argv)


def cmd_generate(args: argparse.Namespace) -> int:
    from millpond.dev.sample_data import activity_files, campaigns_file, clicks_files, customer_change_files

    if args.pipeline not in ("activity", "clicks", "device_status", "customers"):
        return generate_recordings(args)
    pipeline = load_pipeline(args.pipeline)
    if args.pipeline == "customers":
        folder = landing_folder(pipeline, "landing.customer_changes")
        with local_landing([folder]) as (local,):
            landed = customer_change_files(local, args.files, args.rows, args.duplicates, args.seed)
        print(f"landed {len(landed)} files x {args.rows} changes in {folder}")
        return 0
    if args.pipeline == "device_status":
        return send_device_events(pipeline, hours=args.files, rows=args.rows, malformed=args.malformed, seed=args.seed)
    if args.pipeline == "clicks":
        folders = [landing_folder(pipeline, f"landing.{s}") for s in ("impressions", "clicks", "campaigns")]
        with local_landing(folders) as (impressions, clicks, campaigns):
            landed = clicks_files(impressions, clicks, files=args.files, rows=args.rows, seed=args.seed)
            if not any(campaigns.iterdir()):  # the dimension is the user's to edit: written once, never overwritten
                campaigns_file(campaigns)
        print(
            f"landed {len(landed) // 2} rounds x {args.rows} impressions (and their clicks) in {folders[0].parent}"
            f"; the campaigns dimension is {folders[2]}"
        )
        return 0
    folder = landing_folder(pipeline, "landing.activity")
    with local_landing([folder]) as (local,):
        landed = activity_files(local, args.files, args.rows, args.duplicates, args.malformed, args.seed)
    print(f"landed {len(landed)} files x {args.rows} lines in {folder}")
    return 0


def landing_folder(pipeline: Pipeline, source_id: str) -> paths.LakePath:
    """A file source's landing folder: the sample generators land only where the shipped specs read files."""
    return paths.landing_path(cast(FileSource, pipeline.sources[source_id]).path)


@contextmanager
def local_landing(folders: list[paths.LakePath]) -> Iterator[list[Path]]:
    """The landing folders as local folders the sample generators write into (millpond.lake.storage.local_folder):
    on an object-store lake each holds an empty stand-in for every file already landed, as the generators number
    new files after those, and each new file is then put into the bucket whole."""
    with ExitStack() as stack:
        yield [stack.enter_context(storage.local_folder(folder, stand_ins=True)) for folder in folders]


def generate_recordings(args: argparse.Namespace) -> int:
    """Sample recordings for a pipeline of the user's whose json source has their shape (`millpond init`'s)."""
    from millpond.dev.sample_data import activity_files
    from millpond.project.scaffold import has_record_schema

    try:
        pipeline = load_pipeline(args.pipeline)
    except SpecError:
        pipeline = None
    sources = [
        s
        for s in (pipeline.sources.values() if pipeline else [])
        if isinstance(s, FileSource) and s.format == "json" and not s.static and has_record_schema(s.schema)
    ]
    if len(sources) != 1:
        print(
            f"millpond generate: no sample generator for {args.pipeline!r} (available: activity, clicks, "
            "device_status, customers, and a pipeline with one json source of `millpond init`'s record shape)",
            file=sys.stderr,
        )
        return 2
    folder = paths.landing_path(sources[0].path)
    with local_landing([folder]) as (local,):
        landed = activity_files(local, args.files, args.rows, args.duplicates, args.malformed, args.seed)
    print(f"landed {len(landed)} files x {args.rows} lines in {folder}")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    """`millpond init <dir>`: a new project with one pipeline (millpond.project.scaffold)."""
    from millpond.project.scaffold import ScaffoldError, create_project

    folder = Path(args.directory).resolve()
    try:
        written = create_project(folder, args.pipeline)
    except ScaffoldError as error:
        print(f"millpond init: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(folder)}")
    print(
        f"project {args.pipeline!r} in {folder}; next: cd there, `millpond jars`, then the two commands in its "
        "README.md"
    )
    return 0


def cmd_jars(args: argparse.Namespace) -> int:
    """`millpond jars`: Delta's and Kafka's jars (and the report assets) from Maven Central, as `make jars` and
    `make report-assets` fetch them in a checkout."""
    from millpond.project.downloads import DownloadError, fetch_report_assets, fetch_spark_jars

    try:
        jars = fetch_spark_jars(settings.jars_dir())
        print(f"{len(jars)} jars in {settings.jars_dir()}")
        if not args.no_report_assets:
            print(f"report assets in {fetch_report_assets(settings.report_assets_dir())}")
    except DownloadError as error:
        print(f"millpond jars: {error}", file=sys.stderr)
        return 1
    return 0


def cmd_class_archive(args: argparse.Namespace) -> int:
    """`millpond class-archive`: the class-data archive a run's driver JVM starts faster with
    (millpond.driver.class_archive); a failure leaves runs as they were, without one."""
    from millpond.project.class_archive_build import build

    built, said = build(force=args.force)
    print(f"millpond class-archive: {said}", file=sys.stdout if built else sys.stderr)
    return 0 if built else 1


def send_device_events(pipeline: Pipeline, hours: int, rows: int, malformed: float, seed: int | None) -> int:
    """Send device_status's events to its topic, continuing from the newest event time already there."""
    from millpond.dev.kafka_broker import BrokerFailed, latest_event_time, produce
    from millpond.dev.sample_data import ACTIVITY_EPOCH, DEVICES, device_events
    from millpond.spec import environment_problems, resolve_setting

    source = cast(KafkaSource, pipeline.sources["kafka.device_events"])
    readers = [t.id for t in pipeline.tables.values() if t.source == source.id]
    problems = environment_problems(pipeline, readers)  # unset, malformed or no broker there: before any JVM
    if problems:
        print("millpond generate: " + "\n".join(problems), file=sys.stderr)
        return 2
    bootstrap, topic = resolve_setting(source.bootstrap_servers), source.topics[0]
    from millpond.driver.session import build_spark_session

    spark = build_spark_session("millpond-generate", shuffle_partitions=1)
    try:
        newest = latest_event_time(spark, bootstrap, topic)
        start = ACTIVITY_EPOCH if newest is None else newest.replace(minute=0, second=0, microsecond=0) + HOUR
        messages = device_events(start, hours, rows, malformed, seed)
        produce(spark, bootstrap, topic, [(None, key.encode() if key else None, value) for key, value in messages])
    except BrokerFailed as error:
        print(f"millpond generate: {error}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(
        f"sent {len(messages)} messages to topic {topic} on {bootstrap}: {hours} hour(s) of events from "
        f"{start:%Y-%m-%d %H:%M} UTC, {len(DEVICES)} devices"
    )
    return 0


def cmd_engine(args: argparse.Namespace) -> int:
    """`millpond engine start|status|stop`: the lake's Spark Connect server (millpond.driver.connect_server)."""
    from millpond.driver import connect_server as engine
    from millpond.lake import paths

    lake = paths.lake_root()
    if args.action == "start" and args.no_token and not args.foreground:
        print(
            "millpond: --no-token lets anyone who reaches the port run code as you; it is for a container's "
            "server on a private network. Fix: drop --no-token, or use it with --foreground in that container",
            file=sys.stderr,
        )
        return 2
    try:
        if args.action == "start":
            state, started = engine.start(args.host, args.port, args.master, args.foreground, not args.no_token)
            usage = (
                "SQL clients connect with the URL below (it holds the token)"
                if args.jdbc
                else "Airflow's tasks use it with AIRFLOW_CONN_SPARK_CONNECT_MILLPOND set to the line below"
                if args.airflow_connection
                else "Runs use it with SPARK_REMOTE set to the line below"
            )
            print(
                f"millpond: engine pid {state.pid} {'started' if started else 'already up'} on "
                f"{state.host}:{state.port} for {lake} (code {state.fingerprint}); log {state.log}. SQL clients: "
                f"`millpond engine start --jdbc` prints their URL (docs/sql.md). {usage}",
                file=sys.stderr,
            )
            print(
                state.jdbc_url if args.jdbc else state.airflow_connection if args.airflow_connection else state.remote
            )
            return 0
        if args.action == "stop":
            stopped = engine.stop(lake)
            print(f"millpond: engine of {lake}: " + (f"pid {stopped.pid} stopped" if stopped else "none running"))
            return 0
        info = engine.status(lake)
    except engine.EngineError as exc:
        print(f"millpond: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(info, indent=2))
    elif info is None:
        print(f"engine of {lake}: down (none started)")
    else:
        stale = f"; STALE, {', '.join(info['stale_parts'])} changed since start" if info["stale_parts"] else ""
        print(
            f"engine of {lake}: {'up' if info['up'] else 'down'}, pid {info['pid']}, port {info['port']}, code "
            f"{info['fingerprint']}{stale}; log {info['log']}"
        )
    return 0 if info and info["up"] else 1


def cmd_backlog(args: argparse.Namespace) -> int:
    """What each table's next run will read, from the checkpoints and the sources (millpond.lake.backlog)."""
    from millpond.lake.backlog import pipeline_backlog

    pipelines = _pipelines(args.pipeline)
    if pipelines is None:
        return 2
    found = [(p.name, waiting) for p in pipelines for waiting in pipeline_backlog(p)]
    if args.json:
        print(json.dumps([{"pipeline": name, **waiting.as_dict()} for name, waiting in found], indent=2))
        return 0
    print(f"{'pipeline':<16} {'table':<28} {'source':<28} {'files':>7} {'bytes':>12} {'batches':>7}  oldest / note")
    for name, w in found:
        files, size, batches = ("-" if v is None else v for v in (w.files, w.bytes, w.batches))
        extra = [w.note] if w.note else []
        if w.oldest_age_seconds is not None:
            extra.insert(0, f"oldest {w.oldest_age_seconds:.0f} s")
        if w.versions:
            extra.insert(0, f"{w.versions} versions, {w.rows} rows")
        if w.behind is not None:
            extra.insert(0, f"{w.rows} records behind over {len(w.behind)} partition(s)")
        if w.replayed_batch:
            extra.append("a killed run's batch is replayed first")
        print(f"{name:<16} {w.table:<28} {w.source:<28} {files:>7} {size:>12} {batches:>7}  {'; '.join(extra)}")
    return 0


def cmd_freshness(args: argparse.Namespace) -> int:
    """Each table's freshness at now or `--at` (millpond.lake.freshness); exit 1 when one is stale, so a script or a
    sensor can act on it."""
    from datetime import UTC, datetime

    from millpond.lake.freshness import pipeline_freshness

    try:
        at = datetime.fromisoformat(args.at.replace("Z", "+00:00")) if args.at else datetime.now(UTC)
    except ValueError:
        print(f"--at {args.at!r} is not an ISO instant; write e.g. 2026-11-28T15:00:00Z", file=sys.stderr)
        return 2
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    pipelines = _pipelines(args.pipeline)
    if pipelines is None:
        return 2
    found = [(p.name, f) for p in pipelines for f in pipeline_freshness(p, at)]
    if args.json:
        print(json.dumps([{"pipeline": name, **f.as_dict()} for name, f in found], indent=2))
    else:
        print(f"{'pipeline':<16} {'table':<28} {'status':<6} {'age':>10}  {'stale at (UTC)':<20} basis")
        for name, f in found:
            age = "-" if f.age_seconds is None else f"{f.age_seconds / 60:.0f} min"
            stale_at = f.stale_at[:19] if f.stale_at else "-"
            extra = f"; {f.note}" if f.note else ""
            print(f"{name:<16} {f.table:<28} {f.status:<6} {age:>10}  {stale_at:<20} {f.basis}{extra}")
        if not found:
            print("no table has a freshness goal (`freshness:` in its spec: docs/freshness.md)", file=sys.stderr)
    return 1 if any(f.status == "stale" for _, f in found) else 0


def _pipelines(name: str | None) -> list[Pipeline] | None:
    """The named pipeline, or every valid spec (problems printed); None after printing a spec error."""
    if name:
        try:
            return [load_pipeline(name)]
        except SpecError as exc:
            print(exc, file=sys.stderr)
            return None
    pipelines, problems = validate_all()
    for problem in problems:
        print(problem, file=sys.stderr)
    return pipelines


def cmd_status(args: argparse.Namespace) -> int:
    """Each table's path, row count and version from its Delta log (a file sink: its `_spark_metadata` log, the
    version being the newest batch id), and the last run's outcome (no JVM)."""
    from millpond.lake import file_sink_log
    from millpond.lake.delta_log import table_state
    from millpond.runs import run_summary

    pipeline = load_pipeline(args.pipeline)
    summary = run_summary.latest(pipeline.name)
    last = {t["table"]: t for t in summary["tables"]} if summary else {}
    rows = []
    for table_id in pipeline.tables:
        sink = pipeline.tables[table_id].sink
        for path in (paths.table_path(table_id), paths.quarantine_path(table_id)):
            is_table = path == paths.table_path(table_id)
            state = file_sink_log.table_state(path, sink) if sink.is_file and is_table else table_state(path)
            if state is None and path != paths.table_path(table_id):
                continue
            run = last.get(table_id, {}) if path == paths.table_path(table_id) else {}
            rows.append(
                {
                    "path": str(path),
                    "rows": state.rows if state else None,
                    "version": state.version if state else None,
                    "last_run": run.get("outcome", ""),
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'table path':<60} {'rows':>9} {'version':>7}  last run")
    for row in rows:
        rows_text = "-" if row["rows"] is None else row["rows"]
        print(
            f"{row['path']:<60} {rows_text:>9} {row['version'] if row['version'] is not None else '-':>7}  "
            f"{row['last_run']}"
        )
    if summary:
        print(f"last run: {summary['run_id']} -> {run_summary.summary_path(pipeline.name, summary['run_id'])}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # the runner owns its arguments (shared with spark-submit)
        return cmd_run(argv[1:])
    if argv[:1] == ["check"]:
        return cmd_check(argv[1:])
    if argv[:1] == ["preview"]:
        return cmd_preview(argv[1:])
    parser = argparse.ArgumentParser(prog="millpond", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run a pipeline's tables (see `millpond run --help`)")
    sub.add_parser(
        "check", help="run the data-quality gate on a slice, writing a report only (see `millpond check --help`)"
    )
    sub.add_parser(
        "preview", help="print a table's first micro-batches, writing nothing (see `millpond preview --help`)"
    )
    validate = sub.add_parser("validate", help="validate one spec or every spec in pipelines/")
    validate.add_argument("pipeline", nargs="?")
    validate.set_defaults(func=cmd_validate)
    generate = sub.add_parser("generate", help="land sample files for an example pipeline")
    generate.add_argument("pipeline")
    generate.add_argument("--files", type=int, default=3)
    generate.add_argument("--rows", type=int, default=1000)
    generate.add_argument("--duplicates", type=float, default=0.0, help="fraction of re-sent records")
    generate.add_argument("--malformed", type=float, default=0.0, help="fraction of malformed lines")
    generate.add_argument("--seed", type=int, default=None)
    generate.set_defaults(func=cmd_generate)
    init = sub.add_parser("init", help="create a new project folder with one example pipeline, its gate and DAG")
    init.add_argument("directory", help="a new or empty folder")
    init.add_argument("--pipeline", default=DEFAULT_PIPELINE, help=f"the pipeline's name (default: {DEFAULT_PIPELINE})")
    init.set_defaults(func=cmd_init)
    jars = sub.add_parser(
        "jars", help="download the jars runs need (Delta, Kafka) and the report assets from Maven Central"
    )
    jars.add_argument("--no-report-assets", action="store_true", help="only the jars (reports then use CDNs)")
    jars.set_defaults(func=cmd_jars)
    archive = sub.add_parser(
        "class-archive", help="build the class-data archive that makes a run's driver JVM start faster (`make setup`)"
    )
    archive.add_argument("--force", action="store_true", help="build it again even if one exists for this JVM")
    archive.set_defaults(func=cmd_class_archive)
    engine = sub.add_parser(
        "engine",
        help="start, stop or show the lake's engine: a Spark Connect server runs use through SPARK_REMOTE",
    )
    engine.add_argument("action", choices=("start", "stop", "status"))
    engine.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    engine.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    engine.add_argument("--master", default=None, help="Spark master (default MILLPOND_SPARK_MASTER)")
    engine.add_argument("--foreground", action="store_true", help="become the server (a container's command)")
    engine.add_argument(
        "--no-token", action="store_true", help="no token: only on a private network with no published port"
    )
    engine.add_argument(
        "--airflow-connection",
        action="store_true",
        help="start: print the engine as an Airflow connection (AIRFLOW_CONN_SPARK_CONNECT_MILLPOND), not SPARK_REMOTE",
    )
    engine.add_argument(
        "--jdbc", action="store_true", help="start: print the engine's JDBC URL for SQL clients (token included)"
    )
    engine.add_argument("--json", action="store_true")
    engine.set_defaults(func=cmd_engine)
    backlog = sub.add_parser(
        "backlog", help="what each table's next run will read: files, bytes, versions and batches waiting (no JVM)"
    )
    backlog.add_argument("pipeline", nargs="?", help="one pipeline (default: every spec in the pipelines folder)")
    backlog.add_argument("--json", action="store_true")
    backlog.set_defaults(func=cmd_backlog)
    freshness = sub.add_parser(
        "freshness", help="each table with a freshness goal: fresh, warn or stale, its age and deadlines (no JVM)"
    )
    freshness.add_argument("pipeline", nargs="?", help="one pipeline (default: every spec in the pipelines folder)")
    freshness.add_argument("--json", action="store_true")
    freshness.add_argument("--at", help="evaluate at this ISO instant instead of now (e.g. 2026-11-28T15:00:00Z)")
    freshness.set_defaults(func=cmd_freshness)
    catalog_commands.add_parsers(sub)
    status = sub.add_parser("status", help="each table's path, rows and version, and the last run's outcome")
    status.add_argument("pipeline")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
