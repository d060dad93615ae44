"""The DAG factory: one Airflow DAG per pipeline spec, with the same task graph for every pipeline.

    ingest (bronze + silver, one Spark app) -> quality_gate -> gold (one Spark app) -> run_summary

Why a task per layer and not per table: every Spark application pays a JVM start (5-10 s) and the tables of a
layer read each other as streams in one session. Per-table status still shows in the UI: the runner merges
each table's outcome and row counts into the run's JSON summary (keyed by Airflow's run id), and the
`run_summary` task pushes one XCom per table and logs a table, without a JVM.

Imports only `airflow.sdk` and light millpond modules: the DAG processor parses this every 30 s, so pyspark,
delta, great_expectations, pandas and even the Spark provider's modules load only when a task runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import signal
import sys
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, BaseHook, BaseOperator, Param, TriggerRule
from airflow.sdk.definitions.timetables.interval import CronDataIntervalTimetable
from airflow.sdk.exceptions import AirflowException

from millpond import settings
from millpond.airflow.plugin import ReportLink
from millpond.airflow.report import format_summary
from millpond.engine import jars, speedups
from millpond.runs import run_summary
from millpond.spec import Pipeline, SpecError, all_spec_paths, load_pipeline, unset_environment

SPARK_CONN_ID = "spark_millpond"
# The installed runner module's file, found without importing it (it imports pyspark): spark-submit's application.
RUNNER = Path(importlib.util.find_spec("millpond.engine.runner").origin or "")
EXIT_CODES = {1: "a table failed", 2: "invalid spec or arguments", 3: "pipeline busy (another writer holds the lock)"}
INGEST_LAYERS = ("bronze", "silver")
STOPPED = "the Spark application was stopped (task killed, timed out or marked failed)"

# Run-time values reach the job as templated arguments: the event log ties each table's run to this run.
# A run without a logical date (the REST API's default, the UI's trigger without a date) has no data interval, and
# Airflow 3 then leaves `data_interval_start`/`_end` out of the template context altogether: `is defined` first.
NO_INTERVAL = run_summary.NO_INTERVAL
RUN_ARGS = [
    "--run-id",
    "{{ run_id }}",
    "--trigger",
    "{{ dag_run.run_type | string | replace('DagRunType.', '') | lower }}",
    "--data-interval-start",
    "{{ data_interval_start | ts if data_interval_start is defined and data_interval_start else '"
    + NO_INTERVAL
    + "' }}",
    "--data-interval-end",
    "{{ data_interval_end | ts if data_interval_end is defined and data_interval_end else '" + NO_INTERVAL + "' }}",
]


# ---------------------------------------------------------------------------------------------- assets


ASSET_SCHEME = "x-millpond"


def table_asset(table_id: str) -> Asset:
    """The Airflow Asset of one Delta table: other DAGs schedule on `Asset(name="delta.<layer>.<table>")`.

    The identity is the table, not where the lake is: `x-millpond://<layer>/<table>`, never the lake's path. Airflow
    keeps one active asset per name and per URI, so a URI holding `$MILLPOND_LAKE` made a second lake (or a moved one)
    against the same metadata database an inactive asset, and every task naming it failed. An `x-` scheme is one no
    provider claims: Airflow stores it as written (airflow.sdk.definitions.asset._sanitize_uri).
    """
    layer, name = table_id.split(".")
    return Asset(name=f"delta.{table_id}", uri=f"{ASSET_SCHEME}://{layer}/{name}", group="delta")


# ---------------------------------------------------------------------------------------------- Spark submit


def kill_tree(pid: int, grace: float = 10.0) -> None:
    """SIGTERM a process and its descendants (the JVM runs its shutdown hooks), SIGKILL what is left after `grace`."""
    import psutil  # an Airflow dependency; only needed when killing

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def _die_with_parent() -> None:
    """Runs in the spark-submit child before exec: the kernel SIGKILLs it if the task process dies (kill -9)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: on_kill and the supervisor's process-group kill still apply
        pass


class MillpondSparkSubmitOperator(BaseOperator):
    """Runs `millpond/engine/runner.py` for some layers of a pipeline, with the Delta jars and our code shipped.

    Submits through the Spark provider's SparkSubmitHook, imported at run time: the provider's operator module
    pulls in `requests` and friends, which DAG parsing would otherwise pay every 30 s (README "Benchmarks", B6).
    Client mode only: a retry starts a fresh application, never a "reattach".
    """

    template_fields = ("application_args", "conf", "env_vars", "name")
    ui_color = "#f4a460"
    operator_extra_links = (ReportLink(),)  # ingest validates silver, gold its own suites: the run's report

    def __init__(
        self,
        *,
        pipeline: str,
        layers: tuple[str, ...],
        full_refresh: str,
        extra_args: tuple[str, ...] = (),
        conf: dict[str, str] | None = None,
        env_vars: dict[str, str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pipeline, self.layers = pipeline, layers
        self.application, self._conn_id = str(RUNNER), SPARK_CONN_ID
        self.name = f"millpond:{pipeline}:{'+'.join(layers)}"
        self.application_args = [
            pipeline,
            "--layers",
            ",".join(layers),
            *RUN_ARGS,
            "--full-refresh",
            full_refresh,
            "--wait",
            str(settings.LOCK_WAIT_SECONDS.seconds()),
            *extra_args,
        ]
        self.conf, self.env_vars = conf or {}, env_vars or {}
        self.jars = self.py_files = ""
        self._hook = None

    def execute(self, context: Any) -> None:
        if self.run_without_spark():
            return
        master = spark_master(self._conn_id)
        self.log.info("Spark master %s (connection %r)", master, self._conn_id)
        if self.run_in_warm_driver(master):
            return
        self.jars = ",".join(jars.spark_jars())
        self.py_files = str(build_py_files(self.pipeline))
        self.conf = {**spark_conf(), **self.conf}
        self.choose_driver_jit()
        # The driver imports millpond from the zip too, where the repo-relative defaults do not exist.
        self.env_vars = {**job_env(), **self.env_vars}
        self._hook = self.build_hook()
        self._hook.submit(self.application)

    def run_without_spark(self) -> bool:
        """A run in which no table has anything new needs no JVM: the runner records it here, in ~1 s."""
        from millpond.engine import runner

        errors = io.StringIO()  # the runner's own words (e.g. the unset ${NAME} a Kafka spec needs) go into the error
        with contextlib.redirect_stderr(errors):
            code = runner.main(list(self.application_args), spark_allowed=False)
        sys.stderr.write(errors.getvalue())
        if code == runner.NEEDS_SPARK:
            return False
        if code == 0:
            return True
        # No table ran here, so exit 1 is the lake or the event log, not a table (the runner printed which).
        reason = "the run could not be recorded" if code == 1 else EXIT_CODES.get(code, "see the log above")
        detail = errors.getvalue().strip()
        raise AirflowException(
            f"millpond runner exited {code} before any Spark application: {reason}." + (f"\n{detail}" if detail else "")
        )

    def run_in_warm_driver(self, master: str) -> bool:
        """MILLPOND_WARM_DRIVER=on and a local master: the lake's warm driver runs this task's run, no spark-submit.

        Its output streams into this task's log. If the task is killed its connection closes and the driver exits
        mid-run, as spark-submit's process tree would; the retry replays from the checkpoint in a new driver.
        """
        from millpond.engine import warm_driver

        if not warm_driver.wanted():
            return False
        if not master.startswith("local"):
            self.log.info(
                "%s=on, but the master %s is not local: submitting with spark-submit", warm_driver.ENV, master
            )
            return False
        if self.conf:  # a running JVM's session cannot take them all (spark.driver.*, spark.jars, ...)
            self.log.info(
                "%s=on, but this task sets its own Spark conf (%s), which only a new JVM applies: submitting "
                "with spark-submit",
                warm_driver.ENV,
                ", ".join(sorted(self.conf)),
            )
            return False
        env = {**warm_driver.run_env(), **job_env(), **self.env_vars}
        errors: list[str] = []

        def log_lines(text: str, kept: list[str] | None = None) -> None:
            for line in text.rstrip("\n").splitlines():
                self.log.info("%s", line)
                if kept is not None:
                    kept.append(line)

        code = warm_driver.run(list(self.application_args), env, out=log_lines, err=lambda t: log_lines(t, errors))
        if code != 0:
            detail = "\n".join(errors[-20:])
            raise AirflowException(
                f"millpond runner exited {code} in the warm driver: "
                f"{EXIT_CODES.get(code, 'see the log above')}.\n{detail}"
            )
        return True

    def choose_driver_jit(self) -> None:
        """C1-only JIT for a small run's driver JVM (millpond.engine.driver_jit), added to any options the conf has."""
        from millpond.engine import runner

        jit = runner.driver_jit_for(list(self.application_args))
        self.log.info("Driver JIT %s: %s", jit.mode, jit.reason)
        if jit.java_options:
            key = "spark.driver.extraJavaOptions"
            self.conf[key] = " ".join(filter(None, [self.conf.get(key, ""), jit.java_options]))

    def build_hook(self):
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        class MillpondSparkSubmitHook(SparkSubmitHook):
            """spark-submit whose whole process tree (JVM + Python driver) dies with the task; its exit says why."""

            killed = False

            def submit(self, application: str = "", **kwargs: Any) -> str | None:
                kwargs.setdefault("preexec_fn", _die_with_parent)
                try:
                    driver_id = super().submit(application, **kwargs)
                except AirflowException as exc:
                    if self.killed:
                        raise AirflowException(STOPPED) from None
                    code = self._submit_sp.returncode if getattr(self, "_submit_sp", None) else None
                    reason = EXIT_CODES.get(code or 0)
                    if reason:
                        raise AirflowException(f"millpond runner exited {code}: {reason}.\n{exc}") from None
                    raise
                if self.killed:  # the JVM may exit 0 after its shutdown hooks ran
                    raise AirflowException(STOPPED)
                return driver_id

            def on_kill(self) -> None:
                """Stop the spark-submit JVM AND its Python driver (which holds the pipeline lock)."""
                process = getattr(self, "_submit_sp", None)
                if process is not None and process.poll() is None:
                    self.killed = True
                    self.log.info("Stopping spark-submit pid %s and its children", process.pid)
                    kill_tree(process.pid)
                super().on_kill()

        return MillpondSparkSubmitHook(
            conf=self.conf,
            conn_id=self._conn_id,
            py_files=self.py_files,
            jars=self.jars,
            name=self.name,
            application_args=list(self.application_args),
            env_vars=self.env_vars,
        )

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


def spark_master(conn_id: str = SPARK_CONN_ID) -> str:
    """The connection's master, or a clear error: the provider would otherwise fall back to `--master yarn`."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, or a secrets backend error
        raise AirflowException(
            f"Spark connection {conn_id!r} is not defined ({exc}). Fix: set AIRFLOW_CONN_{conn_id.upper()}, e.g. "
            f'\'{{"conn_type": "spark", "host": "local[2]"}}\' or \'spark://spark-master:7077\' '
            "(the Makefile sets local[2]; docker-compose.yaml points it at the Spark master)"
        ) from None
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def job_env() -> dict[str, str]:
    """Where the job finds specs, suites, jars and the lake: absolute, resolved here, not inside the zip."""
    return {
        "MILLPOND_PROJECT": str(settings.project_root()),
        "MILLPOND_LAKE": str(settings.lake_root()),
        "MILLPOND_PIPELINES": str(settings.pipelines_dir()),
        "MILLPOND_EXPECTATIONS": str(settings.expectations_dir()),
        "MILLPOND_JARS": str(settings.jars_dir()),
        "MILLPOND_REPORT_ASSETS": str(settings.report_assets_dir()),
        **speedups.settings_in_environment(),
    }


def spark_conf() -> dict[str, str]:
    """The session conf every millpond application shares (the job sets it itself outside spark-submit)."""
    from millpond.engine.session import base_conf  # imports pyspark: only at task run time

    return {
        **base_conf(),
        "spark.ui.enabled": settings.SPARK_UI.value(),
        "spark.log.level": settings.SPARK_LOG_LEVEL.raw() or "WARN",
    }


def build_py_files(pipeline: str) -> Path:
    """Zip the installed millpond package and the project's code the pipeline's transforms live in, for the
    executors of a cluster (atomic replace: concurrent tasks may build it)."""
    import millpond

    target = settings.cache_dir() / f"millpond-src-{pipeline}.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    package_dir = Path(millpond.__file__).resolve().parent
    project = settings.project_root()
    folders = [(package_dir, package_dir.parent)]
    for top in user_code_packages(load_pipeline(pipeline)):
        if (project / top).is_dir():
            folders.append((project / top, project))
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, base in folders:
            for file in sorted(folder.rglob("*.py")):
                archive.write(file, file.relative_to(base).as_posix())
    os.replace(tmp, target)
    return target


def user_code_packages(pipeline: Pipeline) -> set[str]:
    """The top-level packages of the project that a pipeline's transforms and stateful functions are imported from."""
    references = []
    for table in pipeline.tables.values():
        if table.transform and table.transform.function:
            references.append(table.transform.function)
        if table.stateful:
            references.append(table.stateful.function)
    return {reference.split(":")[0].split(".")[0] for reference in references}


# ---------------------------------------------------------------------------------------------- light tasks


def gate_failures(summary: dict[str, Any] | None) -> list[str]:
    """One message per table the quality gate stopped, naming suite, expectation, count and report."""
    messages = []
    for entry in (summary or {}).get("tables", []):
        if entry.get("outcome") != "gate_failed":
            continue
        gate = entry.get("gate") or {}
        failed = "; ".join(
            f"{f.get('expectation')} unexpected={f.get('unexpected_count')} severity={f.get('severity')}"
            for f in gate.get("failed_expectations", [])
        )
        messages.append(
            f"{entry['table']}: suite {gate.get('suite')} failed: {failed or 'see report'}; "
            f"report {gate.get('report_path')}"
        )
    return messages


class QualityGateOperator(BaseOperator):
    """Fail the run (gold does not start) when a silver batch failed its expectation suite.

    A plain operator rather than `@task`: the TaskFlow decorators cost DAG parsing a heavy import (README
    "Benchmarks", B6), and a class can declare its extra link.
    """

    ui_color = "#e8f7e4"
    operator_extra_links = (ReportLink(),)

    def __init__(self, *, pipeline: str, suites: dict[str, str], **kwargs: Any):
        super().__init__(**kwargs)
        self.pipeline, self.suites = pipeline, suites

    def execute(self, context: Any) -> dict[str, Any]:
        run_id = context["run_id"]
        summary = run_summary.load(self.pipeline, run_id)
        if summary is None:
            where = run_summary.summary_path(self.pipeline, run_id)
            raise AirflowException(f"no run summary for {run_id} at {where}: did ingest run?")
        failures = gate_failures(summary)
        if failures:
            raise AirflowException("quality gate failed:\n" + "\n".join(failures))
        return {"passed": True, "suites": self.suites}


class RunSummaryOperator(BaseOperator):
    """Per-table outcome and row counts for this run, as XComs (key = table id) and a log table."""

    def __init__(self, *, pipeline: str, tables: list[str], **kwargs: Any):
        super().__init__(**kwargs)
        self.pipeline, self.tables = pipeline, tables

    def execute(self, context: Any) -> list[dict[str, Any]]:
        run_id = context["run_id"]
        summary = run_summary.load(self.pipeline, run_id) or {"tables": []}
        by_table = {t["table"]: t for t in summary["tables"]}
        ordered = [by_table[t] for t in self.tables if t in by_table]
        for entry in ordered:
            context["ti"].xcom_push(key=entry["table"], value=entry)
        print(
            f"run {run_id} of pipeline {self.pipeline} "
            f"({run_summary.summary_path(self.pipeline, run_id)}):\n{format_summary(ordered)}"
        )
        print(f"data interval: {run_summary.describe_interval(summary)}")
        missing = [t for t in self.tables if t not in by_table]
        bad = [t["table"] for t in ordered if t.get("outcome") != "succeeded"]
        if bad or missing:
            raise AirflowException(
                f"pipeline {self.pipeline}: not succeeded: {', '.join(bad) or '-'}; "
                f"did not run: {', '.join(missing) or '-'}"
            )
        return ordered


# ---------------------------------------------------------------------------------------------- the factory


def build_dag(pipeline: Pipeline, module_doc: str = "") -> DAG:
    """One DAG per spec: schedule, dates, retries and tags come from the spec; the task graph is fixed."""
    tables = list(pipeline.tables)
    ingest_tables = [t for t in tables if pipeline.tables[t].layer in INGEST_LAYERS]
    gold_tables = pipeline.layer_tables("gold")
    suites = {t.id: t.expectations for t in pipeline.tables.values() if t.expectations}
    schedule: Any = "@once" if pipeline.schedule == "@once" else CronDataIntervalTimetable(pipeline.schedule, "UTC")
    # A pipeline whose Kafka address is not set here would fail every run: created paused, and the UI says why.
    unset = unset_environment(pipeline)
    paused_why = (
        (
            f"Paused: needs {', '.join(unset)} (a Kafka broker; `make kafka-up` starts a local one, then "
            "set it for Airflow and unpause)"
        )
        if unset
        else None
    )
    doc = "\n\n".join(
        part
        for part in (
            f"# {pipeline.name}\n\n{pipeline.description}",
            f"Spec: `{pipeline.spec_path}`",
            "| table | layer | source |\n|---|---|---|\n"
            + "\n".join(
                f"| `{t.id}` | {t.layer} | {' joined with '.join(f'`{u}`' for u in t.upstreams)} |"
                for t in pipeline.tables.values()
            ),
            module_doc,
        )
        if part
    )
    with DAG(
        dag_id=pipeline.name,
        schedule=schedule,
        start_date=datetime.combine(pipeline.start_date, datetime.min.time(), tzinfo=UTC),
        catchup=pipeline.catchup,
        max_active_runs=1,
        tags=["millpond", *pipeline.tags],
        description=paused_why,
        is_paused_upon_creation=True if unset else None,
        doc_md=doc,
        default_args={
            "owner": pipeline.owner,
            "retries": pipeline.retries,
            "retry_delay": timedelta(seconds=settings.RETRY_DELAY_SECONDS.seconds()),
        },
        params={
            "full_refresh": Param(
                [],
                type="array",
                items={"type": "string", "enum": tables},
                title="Full refresh",
                description="Tables to rebuild from their source (checkpoint, data and quarantine dropped); "
                "tables reading them are rebuilt too. Empty: a normal incremental run.",
            ),
        },
        render_template_as_native_obj=False,
    ) as dag:
        # Full refresh goes to the first application that owns a chosen table: the runner rebuilds the tables
        # downstream of it in the same application, and a second reset would throw that rebuild away.
        early = f"params.full_refresh | select('in', {ingest_tables!r})"
        refresh_ingest = "{{ " + early + " | join(',') }}"
        refresh_gold = (
            "{{ '' if (" + early + f" | list) else params.full_refresh | select('in', {gold_tables!r}) | join(',') }}}}"
        )
        timeout = timedelta(seconds=settings.SPARK_TASK_TIMEOUT_SECONDS.seconds())
        ingest = MillpondSparkSubmitOperator(
            task_id="ingest",
            pipeline=pipeline.name,
            layers=INGEST_LAYERS,
            full_refresh=refresh_ingest,
            extra_args=("--defer-gate-failure",),
            execution_timeout=timeout,
            outlets=[table_asset(t) for t in ingest_tables if pipeline.tables[t].layer == "bronze"],
            doc_md=f"Bronze and silver in one Spark application: {', '.join(ingest_tables)}.",
        )

        gate = QualityGateOperator(
            task_id="quality_gate",
            pipeline=pipeline.name,
            suites=suites,
            outlets=[table_asset(t) for t in ingest_tables if pipeline.tables[t].layer == "silver"],
        )
        gold = MillpondSparkSubmitOperator(
            task_id="gold",
            pipeline=pipeline.name,
            layers=("gold",),
            full_refresh=refresh_gold,
            execution_timeout=timeout,
            outlets=[table_asset(t) for t in gold_tables],
            doc_md=f"Gold in one Spark application: {', '.join(gold_tables) or '(no gold tables)'}.",
        )

        summary = RunSummaryOperator(
            task_id="run_summary", pipeline=pipeline.name, tables=tables, trigger_rule=TriggerRule.ALL_DONE
        )
        ingest >> gate >> gold >> summary
    return dag


def build_all(module_doc: str = "", project: Path | None = None) -> dict[str, DAG]:
    """Every spec in the project's pipelines/ as a DAG; a broken spec is an import error naming every problem in it.

    `project` is the folder the DAG file belongs to: Airflow parses and runs it from any working directory.
    MILLPOND_PROJECT, when set, wins.
    """
    if project is not None:
        os.environ.setdefault(settings.PROJECT.name, str(project))
    dags, problems = {}, []
    for path in all_spec_paths():
        try:
            pipeline = load_pipeline(path)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        dags[pipeline.name] = build_dag(pipeline, module_doc)
    if problems:
        raise SpecError(problems + ["(run `make validate`; the other pipelines' DAGs load again once this is fixed)"])
    return dags
