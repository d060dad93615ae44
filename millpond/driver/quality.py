"""The data-quality gate: write-audit-publish per micro-batch, with Great Expectations as the validator.

Inside the gated table's `foreachBatch` (millpond/driver/sinks/gated.py) each micro-batch is persisted, validated
with the table's suite (GX ephemeral context, Spark datasource, whole-dataframe batch), and only then written:

    fail  a failed `fail` expectation raises GateFailed BEFORE any Delta write of the batch: the batch stays
          uncommitted in the checkpoint, so the table and everything downstream are unchanged, and every later
          run replays the same batch and fails again until the rule or the data is fixed (or the failing rows
          are quarantined with `--quarantine-failures <table>`)
    drop  the rows failing it go to the table's quarantine (rule, run id) with the same app id and batch id as
          the table write, and are removed from what the table receives
    warn  reported only

GX decides success and reports counts and samples (Data Docs); which rows are dropped is decided in Spark from
the same expectation definitions (millpond.spec.suites), so the split is exact and runs as one pass.
Validation cost follows the batch, never the table: only the rows this run adds are validated.

great_expectations is imported lazily here (≈3 s): only runs that reach a gated table pay for it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from millpond.driver.run_guard import check_writer
from millpond.lake import paths, storage, system_tables
from millpond.lake.delta_log import latest_version
from millpond.runs import reports
from millpond.runs.gate_report import GateReport, RuleOutcome
from millpond.spec import Pipeline, Table
from millpond.spec.suites import Rule, Suite, load_suite

if TYPE_CHECKING:
    from great_expectations import ExpectationSuite, ValidationDefinition
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context import EphemeralDataContext
    from great_expectations.datasource.fluent import SparkDatasource

# Imported inside functions: Great Expectations (seconds to import) only where a gate validates; `millpond check`'s
# session, engine and dimension modules only when the command runs, since the sinks import this module for every run.

SITE = "millpond_gate"  # our Data Docs site (the ephemeral context already has `local_site`)
SAMPLE_ROWS = 5
# How a batch is validated: first with every expectation's counts only, which is all a batch that passes has to
# show (its Data Docs page reads the same). If anything failed, it is validated again with up to 20 sample failing
# values per expectation, which its Data Docs page shows. Sampling costs GX a Spark job per expectation even when
# nothing fails (1.18 against 0.79 s on a cached 65,283-row silver batch, measured by hand). Not
# unexpected_index_column_names: Data Docs does not show them and they cost ~30 % more Spark jobs; whole failing
# rows are sampled in Spark instead (GateReport samples, shown in the index page).
COUNTS_ONLY: dict[str, Any] = {"result_format": "BASIC", "partial_unexpected_count": 0}
WITH_SAMPLES: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
VALIDATION_COLUMNS = (
    ("run_id", "string"),
    ("pipeline", "string"),
    ("table", "string"),
    ("batch_id", "bigint"),
    ("suite", "string"),
    ("expectation", "string"),
    ("column", "string"),
    ("severity", "string"),
    ("success", "boolean"),
    ("unexpected_count", "bigint"),
    ("element_count", "bigint"),
    ("report_path", "string"),
    ("validated_at", "timestamp"),
)


class GateFailed(RuntimeError):
    def __init__(self, report: GateReport):
        super().__init__(report.message())
        self.report = report


class Gate:
    """Validate and split the batches of one gated table for one run."""

    def __init__(
        self,
        spark: SparkSession,
        pipeline: str,
        table: Table,
        run_id: str,
        *,
        quarantine_failures: bool = False,
        mode: str = "run",
        backlog: tuple[int | None, ...] | None = None,
    ):
        assert table.expectations, f"{table.id} has no expectations suite"
        self.spark, self.pipeline, self.table, self.run_id = spark, pipeline, table, run_id
        self.backlog = backlog  # what was waiting for the table when the run started: into each report
        self.suite: Suite = load_suite(table.expectations)
        self.quarantine_failures, self.mode = quarantine_failures, mode
        self.reports: list[GateReport] = []

    # ---------------------------------------------------------------------------------------- validate
    def validate(self, batch: DataFrame, batch_id: int) -> GateReport:
        """Run the suite on one batch with GX, add failing-row samples, record the report; never writes tables."""
        validated_at = datetime.now(UTC)
        results, report_path = _gx_validate(
            self.suite, batch, self.table, self.pipeline, f"{self.run_id}-{self.mode}-batch{batch_id}", validated_at
        )
        outcomes = []
        for rule in self.suite.rules:
            gx_result = results[rule.name]
            outcome = RuleOutcome(
                rule,
                bool(gx_result["success"]),
                int(gx_result.get("unexpected_count") or 0),
                int(gx_result.get("element_count") or 0),
            )
            if not outcome.success and rule.row_level:
                outcome.samples = [
                    r[0]
                    for r in batch.select(
                        F.expr(rule.unexpected_sql()).alias("_bad"),
                        F.to_json(F.struct(*_data_columns(batch))).alias("_row"),
                    )
                    .where("_bad")
                    .select("_row")
                    .limit(SAMPLE_ROWS)
                    .collect()
                ]
            outcomes.append(outcome)
        element_count = max((o.element_count for o in outcomes), default=0)
        report = GateReport(
            self.pipeline,
            self.table.id,
            self.suite.name,
            self.run_id,
            batch_id,
            self.mode,
            element_count,
            outcomes,
            report_path,
            validated_at,
            self.quarantine_failures,
        )
        report.seconds = (datetime.now(UTC) - validated_at).total_seconds()
        report.backlog = self.backlog
        self.reports.append(report)
        return report

    def publish(self, report: GateReport) -> None:
        """Record the validated batch: history + index page, and (runs only) the validation_results Delta table."""
        reports.record(report.entry())
        print(reports.summary_text(report.entry()), flush=True)
        if self.mode == "check":
            return
        values = [
            (
                self.run_id,
                self.pipeline,
                self.table.id,
                report.batch_id,
                self.suite.name,
                o.rule.name,
                o.rule.column,
                o.rule.severity,
                o.success,
                o.unexpected_count,
                o.element_count,
                report.report_path,
                report.validated_at,
            )
            for o in report.outcomes
        ]
        names = [name for name, _ in VALIDATION_COLUMNS]
        check_writer()  # on the engine: only while the run holds its pipeline (millpond.driver.connect_batch)
        system_tables.append(
            reports.validation_results_path(),
            VALIDATION_COLUMNS,
            [dict(zip(names, row, strict=True)) for row in values],
        )

    # ------------------------------------------------------------------------------------------- split
    def rules_to_set_aside(self, report: GateReport) -> list[Rule]:
        """Drop rules, plus `fail` rules when this run quarantines failures; only those that found rows."""
        outcomes = [o for o in report.outcomes if o.unexpected_count > 0 and o.rule.row_level]
        return [
            o.rule
            for o in outcomes
            if o.rule.severity == "drop" or (o.rule.severity == "fail" and self.quarantine_failures)
        ]

    def split(self, batch: DataFrame, report: GateReport) -> tuple[DataFrame, DataFrame | None]:
        """(rows for the table, rows for the quarantine in the bronze quarantine's shape, or None)."""
        rules = self.rules_to_set_aside(report)
        if not rules:
            return batch, None
        columns = batch.columns
        flagged = batch.withColumn(
            "_gate_rules",
            F.array_compact(F.array(*[F.when(F.expr(rule.unexpected_sql()), F.lit(rule.name)) for rule in rules])),
        )
        good = flagged.where(F.size("_gate_rules") == 0).select(*columns)
        source_file = F.col("_source_file") if "_source_file" in columns else F.lit(None).cast("string")
        bad = flagged.where(F.size("_gate_rules") > 0).select(
            F.to_json(F.struct(*_data_columns(batch))).alias("raw"),
            source_file.alias("source_file"),
            F.concat(
                F.lit(f"failed expectation(s) of suite {self.suite.name}: "), F.array_join("_gate_rules", "; ")
            ).alias("reason"),
            F.array_join("_gate_rules", "; ").alias("rule"),
            F.lit(self.run_id).alias("run_id"),
            F.lit(datetime.now(UTC)).cast("timestamp").alias("quarantined_at"),
        )
        return good, bad


def _data_columns(batch: DataFrame) -> list[str]:
    return [f"`{c}`" for c in batch.columns if not c.startswith("_gate")]


# ------------------------------------------------------------------------------------------------- GX


_CONTEXTS: dict[str, Any] = {}


def _context(docs: Path) -> EphemeralDataContext:
    """One ephemeral GX context per report site and process (context setup costs, batches are many)."""
    key = str(docs)
    if key not in _CONTEXTS:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        context.add_data_docs_site(
            SITE,
            {
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        context.data_sources.add_spark("millpond")
        _CONTEXTS[key] = context
    return _CONTEXTS[key]


def _gx_suite(suite: Suite) -> ExpectationSuite:
    """The suite JSON as a GX suite; each expectation's meta carries our rule name to map results back."""
    import great_expectations as gx

    expectations = []
    for raw, rule in zip(suite.raw["expectations"], suite.rules, strict=True):
        expectations.append(
            {
                "type": raw["type"],
                "kwargs": raw.get("kwargs") or {},
                "description": _describe(rule),
                "meta": {**(raw.get("meta") or {}), "millpond_rule": rule.name},
            }
        )
    return gx.ExpectationSuite(name=suite.name, expectations=expectations, meta=suite.raw.get("meta") or {})


def _describe(rule: Rule) -> str:
    """The line Data Docs shows for an expectation: our rule name (as in messages and quarantine), severity, args."""
    shown = []
    for key, value in rule.kwargs.items():
        if key in ("column", "column_list"):
            continue
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        shown.append(f"{key} = {text}")
    return f"{rule.name} · severity {rule.severity}" + (f" · {'; '.join(shown)}" if shown else "").replace("$", "")


def _gx_validate(
    suite: Suite, batch: DataFrame, table: Table, pipeline: str, run_name: str, run_time: datetime
) -> tuple[dict[str, dict[str, Any]], str]:
    """Validate the batch with GX, write its Data Docs page into the lake; return {rule name: result} and the
    page's path there."""
    lake_docs = reports.docs_dir()
    with storage.local_folder(lake_docs, kept_as="datadocs") as docs:  # GX builds its sites on a local filesystem
        results, page = _gx_validate_into(docs, suite, batch, table, pipeline, run_name, run_time)
    if page and docs != lake_docs:
        page = str(lake_docs / Path(page).relative_to(docs).as_posix())
    return results, page


def _gx_validate_into(
    docs: Path, suite: Suite, batch: DataFrame, table: Table, pipeline: str, run_name: str, run_time: datetime
) -> tuple[dict[str, dict[str, Any]], str]:
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    context = _context(docs)
    source = cast("SparkDatasource", context.data_sources.get("millpond"))  # added by _context
    asset_name = f"{pipeline}.{table.id}"
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(asset_name)
    try:
        batch_definition = asset.get_batch_definition("increment")
    except (KeyError, LookupError):
        batch_definition = asset.add_batch_definition_whole_dataframe("increment")
    gx_suite = context.suites.add_or_update(_gx_suite(suite))  # reloaded each batch: a fixed rule applies at once
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"{asset_name}:{suite.name}", data=batch_definition, suite=gx_suite)
    )
    run_id = RunIdentifier(run_name=_safe(run_name), run_time=run_time)
    identifier, results = _run_checkpoint(context, definition, asset_name, suite, batch, run_id, COUNTS_ONLY)
    if not all(result["success"] for result in results.values()):
        identifier, results = _run_checkpoint(context, definition, asset_name, suite, batch, run_id, WITH_SAMPLES)
    # Build this page only. Not UpdateDataDocsAction: it also rebuilds GX's index, which deletes every page whose
    # result is not in this (ephemeral, in-memory) context, i.e. every earlier run's. Our index links them all.
    context.build_data_docs(site_names=[SITE], resource_identifiers=[identifier], build_index=False)
    context.build_data_docs(
        site_names=[SITE],
        build_index=False,  # the suite page the validation page links to
        resource_identifiers=[ExpectationSuiteIdentifier(name=suite.name)],
    )
    _home_redirect(docs)
    urls = context.get_docs_sites_urls(resource_identifier=identifier, site_names=[SITE])
    site_url = urls[0]["site_url"] if urls else ""
    assert site_url is not None  # the page was built just above
    page = unquote(site_url.removeprefix("file://"))
    suite_page = docs / "expectations" / Path(*suite.name.split(".")).with_suffix(".html")
    try:
        reports.localize_data_docs(docs, [Path(page), suite_page] if page else [suite_page])
    except OSError as exc:  # styling a report never fails a gate: the page still reads, with CDN links
        print(f"millpond: warning: Data Docs under {docs} keep their CDN links ({exc})", file=sys.stderr)
    return results, page


def _run_checkpoint(
    context: EphemeralDataContext,
    definition: ValidationDefinition,
    asset_name: str,
    suite: Suite,
    batch: DataFrame,
    run_id: RunIdentifier,
    result_format: dict[str, Any],
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """One GX validation of the batch: (its result's identifier, {rule name: result}). Evaluation errors raise."""
    import great_expectations as gx

    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(name=f"{asset_name}:gate", validation_definitions=[definition], result_format=result_format)
    )
    run = checkpoint.run(batch_parameters={"dataframe": batch}, run_id=run_id)
    identifier, validation = next(iter(run.run_results.items()))
    results: dict[str, dict[str, Any]] = {}
    for result in validation.results:
        config = result.expectation_config
        assert config is not None  # GX names the expectation of every result it returns
        name = config.meta["millpond_rule"]  # set on every expectation by _gx_suite
        error = _raised(result.exception_info)
        if error:
            raise RuntimeError(f"expectation {name} of suite {suite.name} could not be evaluated: {error}")
        results[name] = {"success": result.success, **dict(result.result or {})}
    return identifier, results


def _home_redirect(docs: Path) -> None:
    """Data Docs pages link 'Home' to the site's index.html: send it to the gate's index over all runs."""
    home = docs / "index.html"
    if not home.exists():
        home.write_text(
            '<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=../index.html">'
            '<a href="../index.html">millpond data-quality gate: all runs</a>\n'
        )


def _raised(info: Any) -> str | None:
    """GX keeps evaluation errors in exception_info, flat or keyed by metric: surface them, never as 'passed'."""
    if not isinstance(info, dict):
        return None
    if info.get("raised_exception"):
        return str(info.get("exception_message"))
    for value in info.values():
        found = _raised(value) if isinstance(value, dict) else None
        if found:
            return found
    return None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


# ------------------------------------------------------------------------------------------ on demand


def pending_versions(pipeline: str, table: Table) -> tuple[int, int] | None:
    """Source versions the gated table has not committed yet (from its checkpoint); None if nothing is pending.

    A Delta source offset (v, -1) means every version before v is consumed; (v, i >= 0) means part of version v
    (treated as consumed: the runner reads whole versions unless a rate limit splits one).
    """
    latest = latest_version(paths.table_path(table.source))
    checkpoint = paths.checkpoint_path(pipeline, table.id)
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")] if checkpoint.exists() else []
    if not commits:
        return (0, latest) if latest >= 0 else None

    offset = json.loads((checkpoint / "offsets" / str(max(commits))).read_text().splitlines()[-1])
    first = int(offset["reservoirVersion"]) + (0 if int(offset.get("index", -1)) == -1 else 1)
    return (first, latest) if first <= latest else None


def read_versions(spark: SparkSession, table_id: str, first: int, last: int) -> DataFrame:
    """The rows an append-only Delta table added in commits first..last, from the files those commits added."""

    root = paths.table_path(table_id)
    files = []
    for version in range(first, last + 1):
        commit = root / "_delta_log" / f"{version:020d}.json"
        if not commit.exists():
            raise ValueError(f"{table_id} has no version {version} (latest: {latest_version(root)})")
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                files.append(str(root / unquote(action["add"]["path"])))
            elif "remove" in action and action["remove"].get("dataChange", True):
                raise ValueError(f"{table_id} version {version} removes rows: only appended versions can be checked")
    current = spark.read.format("delta").load(str(root))
    if not files:
        return spark.createDataFrame([], StructType(current.schema.fields))
    return spark.read.schema(current.schema).parquet(*files)


def check_main(argv: list[str] | None = None) -> int:
    """`millpond check <pipeline> [--table T] [--version-from N --version-to M]`: validate a slice, write nothing.

    The slice is rows of the gated table's SOURCE (by default the versions it has not committed yet: exactly what
    its next run would validate), planned like the table (transform, dedup within the slice). Writes a report and
    an index entry, never a table. Exit 0 if the gate passes, 4 if a `fail` expectation fails, 2 on bad arguments,
    5 when SPARK_REMOTE names an engine that runs other code or does not answer (the check runs there when it is set).
    """

    from millpond.spec import SpecError, load_pipeline
    from millpond.spec.suites import SuiteError

    parser = argparse.ArgumentParser(prog="millpond check", description=(check_main.__doc__ or "").splitlines()[0])
    parser.add_argument("pipeline")
    parser.add_argument("--table", default="", help="gated table (default: every table with an expectations suite)")
    parser.add_argument("--version-from", type=int, default=None, help="first source Delta version of the slice")
    parser.add_argument("--version-to", type=int, default=None, help="last source Delta version (default: latest)")
    parser.add_argument("--master", default=None)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        pipeline = load_pipeline(args.pipeline)
        tables = [pipeline.table(args.table)] if args.table else [t for t in pipeline.tables.values() if t.expectations]
        ungated = [t.id for t in tables if not t.expectations]
        if ungated or not tables:
            raise SpecError([f"{', '.join(ungated) or pipeline.name}: no expectations suite to check"])
        for table in tables:
            load_suite(table.expectations or "")
    except (SpecError, SuiteError) as exc:
        print(f"millpond check: {exc}", file=sys.stderr)
        return 2
    from millpond.driver import targets
    from millpond.driver.connect_server import EngineError

    try:
        with targets.for_command(args.master).command_session(f"millpond-check:{pipeline.name}", pipeline) as spark:
            return _check_tables(spark, pipeline, tables, args)
    except EngineError as exc:  # the engine runs other code than this command, or does not answer: nothing ran
        print(f"millpond check: {exc}", file=sys.stderr)
        return 5


def _check_tables(spark: SparkSession, pipeline: Pipeline, tables: list[Table], args: argparse.Namespace) -> int:
    """Validate each table's slice of its source's versions against its suite (check_main's work, once a session is up)."""
    from millpond.driver.plan import plan_table
    from millpond.driver.sources import DimensionProblem, read_dimension

    run_id = f"check__{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"
    worst = 0
    for table in tables:
        if args.version_from is not None:
            last = args.version_to if args.version_to is not None else latest_version(paths.table_path(table.source))
            window: tuple[int, int] | None = (args.version_from, last)
            if args.version_from < 0 or args.version_from > last:
                print(
                    f"millpond check: --version-from {args.version_from} is outside {table.source}'s versions "
                    f"0..{latest_version(paths.table_path(table.source))}",
                    file=sys.stderr,
                )
                return 2
        else:
            window = pending_versions(pipeline.name, table)
        if window is None:
            print(
                f"{table.id}: nothing pending in {table.source} (the table has committed every version); "
                f"choose a slice with --version-from N [--version-to M]"
            )
            continue
        try:
            source = read_versions(spark, table.source, *window)
        except ValueError as exc:
            print(f"millpond check: {exc}", file=sys.stderr)
            return 2
        print(f"{table.id}: checking {table.source} versions {window[0]}..{window[1]} with suite {table.expectations}")
        try:
            dimension = read_dimension(spark, pipeline, table)
        except DimensionProblem as exc:
            print(f"millpond check: {exc}", file=sys.stderr)
            return 2
        planned = plan_table(source, table, dimension=dimension).persist()
        gate = Gate(spark, pipeline.name, table, run_id, mode="check")
        report = gate.validate(planned, 0)
        gate.publish(report)
        planned.unpersist()
        if report.blocking:
            print(f"millpond check: {report.message()}", file=sys.stderr)
            worst = 4
    return worst
