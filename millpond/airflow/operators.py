"""The tasks of a pipeline's DAG. Each operator stores its arguments when the DAG is parsed and does its work in
execute(), as the Airflow Spark provider's operators do: the Spark submit operator builds its hook there.

    MillpondSparkSubmitOperator   one Spark application of the runner for some layers (ingest, gold)
    QualityGateOperator           stops the run before gold when a silver batch failed its suite
    RunSummaryOperator            per-table outcome and row counts as XComs, without a JVM
    SpecProblemsOperator          the one task of a broken spec's DAG: fails naming every problem

Plain operators rather than `@task`: the TaskFlow decorators cost DAG parsing a heavy import (docs/benchmarks.md,
B6), and a class can declare its extra link.
"""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import sys
from datetime import UTC
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from millpond import process_env, settings
from millpond.airflow.plugin import ReportLink
from millpond.airflow.py_files import build_py_files
from millpond.airflow.report import format_summary
from millpond.airflow.spark_app import (
    AWS_CONN_ID,
    EXIT_CODES,
    RUNNER,
    SPARK_CONN_ID,
    engine_remote,
    job_env,
    lake_access,
    lake_jars,
    spark_conf,
    spark_master,
)
from millpond.driver import jars
from millpond.driver.connect_server import REMOTE_ENV
from millpond.runs import run_summary
from millpond.runs.lineage import PARENT, ROOT_PARENT

if TYPE_CHECKING:
    from millpond.airflow.hooks import MillpondSparkSubmitHook

log = logging.getLogger(__name__)

# Imported inside functions: the runner and its driver modules only inside a task's execute(): the DAG processor imports
# the operators every 30 s.

# Run-time values reach the job as templated arguments: the event log ties each table's run to this run.
# A run without a logical date (the REST API's default, the UI's trigger without a date) has no data interval, and
# Airflow 3 then leaves `data_interval_start`/`_end` out of the template context altogether: `is defined` first.
NO_INTERVAL = run_summary.NO_INTERVAL
RUN_ARGS = [
    "--run-id",
    "{{ run_id if not dag.dag_id.endswith('"
    + run_summary.REPROCESS_DAG_SUFFIX
    + "') else dag.dag_id ~ '.' ~ run_id }}",
    "--trigger",
    "{{ dag_run.run_type | string | replace('DagRunType.', '') | lower }}",
    "--data-interval-start",
    "{{ data_interval_start | ts if data_interval_start is defined and data_interval_start else '"
    + NO_INTERVAL
    + "' }}",
    "--data-interval-end",
    "{{ data_interval_end | ts if data_interval_end is defined and data_interval_end else '" + NO_INTERVAL + "' }}",
]


# ---------------------------------------------------------------------------------------------- Spark submit


class MillpondSparkSubmitOperator(BaseOperator):
    """Runs `millpond/driver/runner.py` for some layers of a pipeline, with the Delta jars and our code shipped.

    Three ways to run, cheapest first: without a JVM when no table has anything new, on the engine when one is named
    (spark_app.engine_remote: the Airflow connection, else SPARK_REMOTE), else spark-submit through
    MillpondSparkSubmitHook. Client mode only: a retry starts a fresh application, never a "reattach".
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
        self._hook: MillpondSparkSubmitHook | None = None

    def execute(self, context: Any) -> None:
        interval = reprocess_interval(context)
        self.application_args = [*self.application_args, *reprocess_args(context, interval)]
        if interval:
            self.log.info("Reprocessing the data interval %s (docs/reprocess.md)", interval)
        with lake_access() as access, process_env.scoped(lineage_parent(context)):
            if access:  # an object-store lake's AWS_* from the Airflow connection (spark_app)
                self.log.info("Object-store lake: AWS_* from Airflow connection %r", AWS_CONN_ID)
            if self.run_without_spark():
                return
            if self.run_on_engine():  # the engine (millpond.driver.connect_server): no spark-submit
                return
            self.submit()

    def submit(self) -> None:
        """spark-submit of the runner: jars, code, conf and environment resolved now, on the worker."""
        master = spark_master(self._conn_id)
        self.log.info("Spark master %s (connection %r)", master, self._conn_id)
        self.jars = ",".join([*jars.spark_jars(), *lake_jars(master)])
        self.py_files = str(build_py_files(self.pipeline))
        self.conf = {**spark_conf(master), **self.conf}
        self.choose_driver_jit()
        # The driver imports millpond from the zip too, where the repo-relative defaults do not exist. The lake's
        # credentials are not among them: spark-submit inherits them from this process's environment (lake_access),
        # since the provider turns env_vars into --conf arguments under a yarn or k8s master.
        self.env_vars = {**job_env(), **self.env_vars}
        self._hook = self.build_hook()
        # An engine's address would make spark-submit a Connect client (--remote) instead of submitting to the
        # master; hidden from spark-submit only, later tasks of this process still see it.
        with process_env.scoped({REMOTE_ENV: None}):
            self._hook.submit(self.application)

    def run_without_spark(self) -> bool:
        """A run in which no table has anything new needs no JVM: the runner records it here, in ~1 s."""
        from millpond.driver import runner

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

    def run_on_engine(self) -> bool:
        """An engine named (spark_app.engine_remote: the Airflow connection, else SPARK_REMOTE): the run goes to it as
        a runner process of its own, its output in this task's log. on_kill sends it SIGTERM, which releases its
        Connect session: the server stops its queries."""
        remote = engine_remote()
        if remote is None:
            return False
        if self.conf:  # a running server's session cannot take them all (spark.driver.*, spark.jars, ...)
            self.log.info(
                "An engine is named, but this task sets its own Spark conf (%s), which only a new JVM applies: "
                "submitting with spark-submit",
                ", ".join(sorted(self.conf)),
            )
            return False
        env = process_env.child({**job_env(), REMOTE_ENV: remote, **self.env_vars})
        command = [sys.executable, "-m", "millpond.driver.runner", *self.application_args]
        # In the task's process group: a kill of the task's group reaches the run too; and a task process killed
        # outright (SIGKILL, no on_kill) takes the run with it, as it takes spark-submit's tree.
        from millpond.airflow.processes import die_with_parent

        self._engine_run = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_parent
        )
        lines: list[str] = []
        assert self._engine_run.stdout is not None
        for line in self._engine_run.stdout:
            self.log.info("%s", line.rstrip("\n"))
            lines = [*lines[-19:], line.rstrip("\n")]
        code = self._engine_run.wait()
        if code != 0:
            detail = "\n".join(lines)
            raise AirflowException(
                f"millpond runner exited {code} on the engine: {EXIT_CODES.get(code, 'see the log above')}.\n{detail}"
            )
        return True

    def choose_driver_jit(self) -> None:
        """C1-only JIT for a small run's driver JVM (millpond.driver.driver_jit) and the class-data archive
        (millpond.driver.class_archive), added to any options the conf has."""
        from millpond.driver import class_archive, runner

        jit = runner.driver_jit_for(list(self.application_args))
        self.log.info("Driver JIT %s: %s", jit.mode, jit.reason)
        archive = class_archive.driver_options(self.conf.get("spark.driver.extraClassPath", ""))
        options = " ".join(filter(None, [jit.java_options, archive]))
        if options:
            key = "spark.driver.extraJavaOptions"
            self.conf[key] = " ".join(filter(None, [self.conf.get(key, ""), options]))

    def build_hook(self) -> MillpondSparkSubmitHook:
        """The hook for this task's arguments as execute() resolved them."""
        from millpond.airflow.hooks import MillpondSparkSubmitHook  # the provider's heavy imports: run time only

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
        run = getattr(self, "_engine_run", None)
        if run is not None and run.poll() is None:  # TERM: the runner releases its session; KILL if it hangs
            run.terminate()
            try:  # within Airflow's 5 s between its own SIGTERM of the task and its SIGKILL
                run.wait(timeout=4)
            except subprocess.TimeoutExpired:
                run.kill()


def lineage_parent(context: Any) -> dict[str, str | None]:
    """This task instance as the parent of the run's lineage events (millpond.runs.lineage), in OpenLineage's
    standard variables and with the ids the OpenLineage provider gives the task's own events, so both join in one
    graph. Without the provider, or with it disabled (no transport configured), the run is its own parent; an id
    the provider cannot make is logged, never a failed task."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id
    except ImportError:
        return {}
    try:
        if is_disabled():
            return {}
        task_instance = context["ti"]
        return {PARENT: lineage_parent_id(task_instance), ROOT_PARENT: lineage_root_parent_id(task_instance)}
    except Exception as exc:
        log.warning("The OpenLineage parent of this task could not be made (%s): the run is its own parent", exc)
        return {}


def reprocess_args(context: Any, interval: str | None) -> list[str]:
    """The runner's reprocess arguments: the interval (or `none`), and `--allow-missing-files` when the run's
    `allow_missing_files` param says its landing files gone since they were read may take their rows with them."""
    allowed = bool((context.get("params") or {}).get("allow_missing_files")) and interval is not None
    return ["--reprocess", interval or "none", *(["--allow-missing-files"] if allowed else [])]


def reprocess_interval(context: Any) -> str | None:
    """`START/END` when this run reprocesses its data interval, else None.

    The run's `reprocess` param (its conf) decides; unset, a backfill run reprocesses (it exists to redo its
    interval) and other runs drain what is new.
    """
    params = context.get("params") or {}
    chosen = params.get("reprocess")
    if params.get("full_refresh"):
        return None  # the run rebuilds those tables from all of their source: every interval at once
    if chosen is None:
        run_type = getattr(context["dag_run"], "run_type", "")
        chosen = str(getattr(run_type, "value", run_type)).lower() == "backfill"
    if not chosen:
        return None
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if not start or not end:
        raise AirflowException(
            "this run reprocesses its data interval, but it has none. Fix: trigger it with a logical date (the UI's "
            'trigger form, or `logical_date` in the REST call), or set {"reprocess": false} in its conf'
        )
    return f"{start.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}/{end.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


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
    """Fail the run (gold does not start) when a silver batch failed its expectation suite."""

    ui_color = "#e8f7e4"
    operator_extra_links = (ReportLink(),)

    def __init__(self, *, pipeline: str, suites: dict[str, str], **kwargs: Any):
        super().__init__(**kwargs)
        self.pipeline, self.suites = pipeline, suites

    def execute(self, context: Any) -> dict[str, Any]:
        _, run_id = run_summary.dag_run_key(context["dag"].dag_id, context["run_id"])
        with lake_access():
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
        _, run_id = run_summary.dag_run_key(context["dag"].dag_id, context["run_id"])
        with lake_access():
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


class SpecProblemsOperator(BaseOperator):
    """The single task of a broken spec's DAG: a run of it fails with every problem, so the run's log says what to fix
    (the DAG's docs say the same before anyone runs it)."""

    ui_color = "#f8d7da"

    def __init__(self, *, problems: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.problems = problems

    def execute(self, context: Any) -> None:
        raise AirflowException(self.problems)
