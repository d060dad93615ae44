"""`millpond preview <pipeline> <table>`: a table's micro-batches printed on the terminal, nothing written.

The notebook `display(streaming_df)` of the Structured Streaming course, for a spec: the same source read and
the same plan `run_table` runs (sources.read_table_source + plan.plan_table, in the table's output mode), into a
`foreachBatch` that collects each batch to the driver and prints it. Differences from a run, on purpose:
- the source is read one file per micro-batch (Delta or landing; a change feed's reader reads all that is new in
  one, as its runs do), or --rows messages per micro-batch (Kafka, from the spec's `starting_offsets`), so the
  batches are small and numbered, and the query stops after --batches of them;
- the checkpoint lives in a temporary folder outside the lake, deleted afterwards, and no pipeline lock is
  taken: the lake (tables, quarantines, checkpoints, event log) is left exactly as it was (and a topic too: Spark's
  Kafka source commits no consumer offsets);
- no gate, no quarantine split: a landing table's rows keep their `_error` (non-null: the quarantine's reason).

Exit codes: 0 shown, 1 the query failed or its upstream has no data yet, 2 invalid spec, table or arguments.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from millpond.lake import paths
from millpond.lake.delta_log import CHANGE_FEED_PROPERTY, change_feed_on, latest_version
from millpond.spec import (
    FileSource,
    KafkaSource,
    Pipeline,
    RateLimit,
    SpecError,
    Table,
    environment_problems,
    load_pipeline,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Imported inside functions: pyspark and the session only once a preview runs, not when the CLI builds its parser.

HIDDEN = (
    "_raw",
    "_new_fields",
    "_line_bucket",
)  # a landing read's raw text (quarantine material) and drift bookkeeping
CELL = 24  # characters shown per value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="millpond preview", description=__doc__.splitlines()[0])
    parser.add_argument("pipeline", help="pipeline name (pipelines/<name>.yaml) or a spec path")
    parser.add_argument("table", help="table id, e.g. silver.activity (or silver/activity)")
    parser.add_argument("--batches", type=_positive, default=3, help="stop after this many micro-batches (default 3)")
    parser.add_argument("--rows", type=_positive, default=10, help="rows shown per micro-batch (default 10)")
    parser.add_argument("--master", default=None, help="Spark master (default local[2] or $MILLPOND_SPARK_MASTER)")
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number >= 1")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        pipeline = load_pipeline(args.pipeline)
        table = pipeline.table(args.table)
    except SpecError as exc:
        print(f"millpond preview: invalid spec or arguments:\n{exc}", file=sys.stderr)
        return 2
    unset = environment_problems(pipeline, [table.id])  # a Kafka address: unset, malformed or nobody answering
    if unset:
        print("millpond preview: invalid environment:\n" + "\n".join(unset), file=sys.stderr)
        return 2
    missing = missing_input(pipeline, table)
    if missing:  # answered before any JVM starts
        print(f"millpond preview: {missing}", file=sys.stderr)
        return 1
    from pyspark.sql.utils import CapturedException

    from millpond.driver.session import build_spark_session
    from millpond.driver.sources import DimensionProblem

    # A JVM of its own even with SPARK_REMOTE set: each batch prints from foreachBatch, which on an engine runs in the
    # server's Python worker, out of this terminal's reach.
    spark = build_spark_session(f"millpond-preview:{pipeline.name}", pipeline.shuffle_partitions, args.master)
    checkpoint = Path(tempfile.mkdtemp(prefix="millpond-preview-"))
    reads = " joined with ".join(table.upstreams)
    unit = f"{args.rows} messages" if table.reads_kafka else "one file"
    print(
        f"millpond preview: {pipeline.name} {table.id} ({table.query_output_mode} mode) reads {reads} {unit} "
        f"per micro-batch, at most {args.batches} micro-batches, {args.rows} rows each; nothing is written to "
        "the lake"
    )
    try:
        shown, stopped = run_preview(spark, pipeline, table, checkpoint, args.batches, args.rows)
    except CapturedException as exc:
        print(f"millpond preview: {table.id} failed: {str(exc).strip().splitlines()[0][:2000]}", file=sys.stderr)
        return 1
    except DimensionProblem as exc:  # a lookup's dimension is missing or holds a key twice
        print(f"millpond preview: {table.id} failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    batches = f"{shown} micro-batch{'es' if shown != 1 else ''}"
    if stopped:
        print(f"millpond preview: stopped after {batches} (--batches {args.batches})")
    else:
        print(f"millpond preview: all available input shown in {batches}")
    return 0


def missing_input(pipeline: Pipeline, table: Table) -> str | None:
    """Why there is nothing to preview yet, with the fix; None when the source exists."""
    if table.reads_kafka:  # whether the topic holds anything only the broker knows: the query finds out
        return None
    if table.reads_landing:
        source = pipeline.sources[table.source]
        assert isinstance(source, FileSource)  # the spec loader keys landing sources `landing.<name>`
        folder = paths.landing_path(source.path)
        if not folder.is_dir():
            return f"{table.id} reads {table.source}, whose folder {folder} does not exist yet. Fix: land files there"
        return None
    if table.reads_delta_source:
        return _delta_source_missing(pipeline, table)
    for upstream in table.upstreams:
        if latest_version(paths.table_path(upstream)) < 0:
            return (
                f"{table.id} reads {upstream}, which has no data yet. Fix: millpond run {pipeline.name} "
                f"--tables {upstream}"
            )
    if table.reads_change_feed(table.source) and change_feed_on(paths.table_path(table.source)) is False:
        return (  # Delta has no changes to show for versions written before it (DELTA_MISSING_CHANGE_DATA)
            f"{table.id} reads {table.source}'s change data feed, which is not on yet: the table's first run turns "
            f"it on. Fix: millpond run {pipeline.name} --tables {table.id}"
        )
    return None


def _delta_source_missing(pipeline: Pipeline, table: Table) -> str | None:
    """Why another job's Delta table cannot be previewed yet: it does not exist, or its owner has not turned its
    change data feed on (millpond never does that for a table it does not write)."""
    location = paths.upstream_path(pipeline, table.source)
    if latest_version(location) < 0:
        return f"{table.id} reads {table.source}, but {location} holds no Delta table yet. Fix: write it there first"
    if change_feed_on(location) is False:
        return (
            f"{table.id} reads {table.source}'s change data feed, which is off at {location}. Fix: its owner sets "
            f"TBLPROPERTIES ('{CHANGE_FEED_PROPERTY}' = 'true')"
        )
    return None


def small_batches(pipeline: Pipeline, table: Table, rows: int) -> tuple[Pipeline, Table]:
    """The spec with its source read one file (or `rows` Kafka messages) per micro-batch: small batches, and a query
    that can stop early."""
    one = RateLimit(max_files_per_trigger=1)
    source = pipeline.sources.get(table.source)
    if isinstance(source, KafkaSource):
        source = replace(source, rate_limit=RateLimit(max_offsets_per_trigger=rows))
        return replace(pipeline, sources={**pipeline.sources, source.id: source}), table
    if isinstance(source, FileSource):
        source = replace(source, rate_limit=one)
        return replace(pipeline, sources={**pipeline.sources, source.id: source}), table
    return pipeline, replace(table, rate_limit=one)


class BatchPrinter:
    """foreachBatch target: print each batch's id, row count and first rows; tell the driver when it has enough."""

    def __init__(self, batches: int, rows: int, collect_all: bool = False):
        self.batches, self.rows = batches, rows
        # A sorted complete-mode batch is collected whole: Spark 4.2 fails count() on the cached sorted batch
        # ("key not found" on a group column), and a complete-mode result is an aggregate, small by nature.
        self.collect_all = collect_all
        self.shown = 0
        self.enough = threading.Event()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.shown >= self.batches:  # the query is being stopped: say nothing more
            return
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        shown = batch.select(*[c for c in batch.columns if c not in HIDDEN])
        if self.collect_all:
            everything = shown.collect()
            count, bad, rows = len(everything), 0, everything[: self.rows]
        else:
            batch = batch.persist(StorageLevel.MEMORY_AND_DISK)  # the plan runs once (state stores commit once)
            try:
                has_error = "_error" in batch.columns
                counted = batch.agg(
                    F.count(F.lit(1)), F.count_if(F.col("_error").isNotNull()) if has_error else F.lit(0)
                )
                row = counted.first()
                assert row is not None  # a global aggregate has one row
                count, bad = row
                rows = shown.take(self.rows) if count else []
            finally:
                batch.unpersist()
        note = f", {bad} with an _error (they would go to the quarantine)" if bad else ""
        first = f", first {len(rows)}" if count > len(rows) else ""
        print(f"\nbatch {batch_id}: {count} row{'s' if count != 1 else ''}{first}{note}")
        if rows:
            print(format_table(shown.columns, [list(r) for r in rows]))
        sys.stdout.flush()
        self.shown += 1
        if self.shown >= self.batches:
            self.enough.set()


def run_preview(
    spark: SparkSession, pipeline: Pipeline, table: Table, checkpoint: Path, batches: int, rows: int
) -> tuple[int, bool]:
    """(micro-batches shown, whether the query was stopped before its input ran out)."""
    from millpond.driver import sources
    from millpond.driver.plan import plan_table

    pipeline, table = small_batches(pipeline, table, rows)
    df = plan_table(
        sources.read_table_source(spark, pipeline, table),
        table,
        sources.read_join_source(spark, pipeline, table),
        sources.read_dimension(spark, pipeline, table),
    )
    printer = BatchPrinter(batches, rows, collect_all=bool(table.order_by))
    query = (
        df.writeStream.queryName(f"preview.{paths.query_name(pipeline.name, table.id)}")
        .option("checkpointLocation", str(checkpoint))
        .outputMode(table.query_output_mode)
        .foreachBatch(printer)
        .trigger(availableNow=True)  # a processingTime table too: the preview must end
        .start()
    )
    stopped = False
    while query.isActive:
        if printer.enough.wait(0.2):
            stopped = query.isActive
            query.stop()
            break
    query.awaitTermination()
    return printer.shown, stopped


def format_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A plain text grid, each value cut to CELL characters (like `DataFrame.show`, without its private API)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |", line]
    out += ["| " + " | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) + " |" for row in cells]
    return "\n".join([*out, line])


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    text = value.isoformat(sep=" ") if isinstance(value, datetime) else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= CELL else text[: CELL - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
