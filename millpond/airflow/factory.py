"""The DAG factory: one Airflow DAG per pipeline spec, with the same task graph for every pipeline.

    ingest (bronze + silver, one Spark app) -> quality_gate -> gold (one Spark app) -> run_summary

and, when a table has a freshness goal, one more DAG, `millpond_freshness`, that checks the tables on its own
schedule (millpond.airflow.alerts), and a deadline alert on the pipeline's DAG.

Why a task per layer and not per table: every Spark application pays a JVM start (5-10 s) and the tables of a
layer read each other as streams in one session. Per-table status still shows in the UI: the runner merges
each table's outcome and row counts into the run's JSON summary (keyed by Airflow's run id), and the
`run_summary` task pushes one XCom per table and logs a table, without a JVM.

A spec that does not load becomes a DAG of its own, paused, that shows its problems: a broken spec must not take the
other pipelines' DAGs down with it, as an import error of the DAG file would.

Imports only `airflow.sdk` and light millpond modules: the DAG processor parses this every 30 s, so pyspark,
delta, great_expectations, pandas and even the Spark provider's modules load only when a task runs.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule
from airflow.sdk.definitions.timetables.interval import CronDataIntervalTimetable
from airflow.sdk.definitions.timetables.trigger import CronTriggerTimetable

from millpond import process_env, settings
from millpond.airflow.alerts import Alerting, FreshnessSentinelOperator, run_deadline
from millpond.airflow.assets import table_asset
from millpond.airflow.operators import (
    MillpondSparkSubmitOperator,
    QualityGateOperator,
    RunSummaryOperator,
    SpecProblemsOperator,
)
from millpond.runs import run_summary
from millpond.spec import Pipeline, SpecError, all_spec_paths, load_pipeline, unset_environment

log = logging.getLogger(__name__)

INGEST_LAYERS = ("bronze", "silver")


REPROCESS_SUFFIX = run_summary.REPROCESS_DAG_SUFFIX
FRESHNESS_DAG_ID = "millpond_freshness"


def build_dag(
    pipeline: Pipeline, module_doc: str = "", reprocessing: bool = False, alerting: Alerting | None = None
) -> DAG:
    """One DAG per spec: schedule, dates, retries and tags come from the spec; the task graph is fixed.

    `reprocessing`: the spec's second DAG, `<pipeline>__reprocess`, the same tasks on its `reprocess_schedule`: a
    backfill of it reprocesses one (coarser) interval per run, e.g. a day of an hourly pipeline. Its scheduled runs
    only drain what is new, like the main DAG's (usually nothing: no JVM), under the same pipeline lock.

    A pipeline with freshness goals gets a deadline alert on its main DAG (run_deadline), sent through `alerting`;
    not on the reprocess DAG, whose backfill runs wait their turn by design.
    """
    cron = pipeline.reprocess_schedule if reprocessing and pipeline.reprocess_schedule else pipeline.schedule
    schedule: Any = "@once" if cron == "@once" else CronDataIntervalTimetable(cron, "UTC")
    # A pipeline whose Kafka address is not set here would fail every run: created paused, and the UI says why.
    unset = unset_environment(pipeline)
    paused_why = (
        f"Paused: needs {', '.join(unset)} (a Kafka broker; `make kafka-up` starts a local one, then set it for "
        "Airflow and unpause)"
    )
    with DAG(
        dag_id=pipeline.name + (REPROCESS_SUFFIX if reprocessing else ""),
        schedule=schedule,
        start_date=datetime.combine(pipeline.start_date, datetime.min.time(), tzinfo=UTC),
        catchup=pipeline.catchup,
        max_active_runs=1,
        tags=["millpond", *pipeline.tags],
        description=paused_why if unset else None,
        is_paused_upon_creation=True if unset else None,
        deadline=None if reprocessing else run_deadline(pipeline, alerting or Alerting.from_settings()),
        doc_md=dag_doc(pipeline, module_doc, cron if reprocessing else None),
        default_args={
            "owner": pipeline.owner,
            "retries": pipeline.retries,
            "retry_delay": timedelta(seconds=settings.RETRY_DELAY_SECONDS.seconds()),
        },
        params=run_params(list(pipeline.tables)),
        render_template_as_native_obj=False,
        # The DAG file's globals are the one list of DAGs: a DAG Airflow refuses (build_all) must not reach the
        # DagBag through the `with` block's registration and fail the whole file.
        auto_register=False,
    ) as dag:
        add_tasks(pipeline)
    return dag


def dag_doc(pipeline: Pipeline, module_doc: str, reprocess_cron: str | None) -> str:
    """The DAG's page in the UI: the spec's description, its file, its tables and, for the reprocess DAG, its use."""
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
    if reprocess_cron:
        doc += (
            f"\n\nThe tasks of `{pipeline.name}` on a coarser schedule ({reprocess_cron}): backfill this DAG to "
            f"reprocess one {reprocess_cron} interval per run. Its scheduled runs only drain what is new."
        )
    return doc


def run_params(tables: list[str]) -> dict[str, Param]:
    """What a manual run or a backfill may ask for (the trigger form in the UI)."""
    return {
        "full_refresh": Param(
            [],
            type="array",
            items={"type": "string", "enum": tables},
            title="Full refresh",
            description="Tables to rebuild from their source (checkpoint, data and quarantine dropped); "
            "tables reading them are rebuilt too. Empty: a normal incremental run.",
        ),
        "reprocess": Param(
            None,
            type=["null", "boolean"],
            title="Reprocess the data interval",
            description="Rebuild the rows whose event time lies in this run's data interval from the landing "
            "files as they are now, after draining what is new. Empty: " + "yes for a backfill run, no otherwise.",
        ),
        "allow_missing_files": Param(
            False,
            type="boolean",
            title="Allow missing landing files",
            description="When reprocessing: landing files of the interval gone since they were read are gone "
            "for good, so their rows are removed too. Off: such a reprocess fails, naming the files.",
        ),
    }


def add_tasks(pipeline: Pipeline) -> None:
    """The fixed task graph, inside the DAG's `with` block: ingest >> quality_gate >> gold >> run_summary."""
    tables = list(pipeline.tables)
    ingest_tables = [t for t in tables if pipeline.tables[t].layer in INGEST_LAYERS]
    gold_tables = pipeline.layer_tables("gold")
    suites = {t.id: t.expectations for t in pipeline.tables.values() if t.expectations}
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


def broken_spec_dag(path: Path, problems: list[str]) -> DAG:
    """A stand-in DAG for a spec that does not load: the pipeline's dag id, paused, listing every problem.

    The dag id is the file's stem, which is the pipeline's name once the spec loads (the loader requires it), so the
    pipeline's page in the UI keeps its place and says what to fix. No schedule: nothing runs until someone triggers
    it, and then its one task fails with the same problems.
    """
    dag_id = re.sub(r"[^\w.-]", "_", path.stem)  # what Airflow accepts as a dag id
    summary = f"Broken spec {path.name}: {len(problems)} problem(s); the pipeline does not run until it is fixed"
    fix = "Run `make validate` to check every spec; this DAG becomes the pipeline again once its spec loads."
    text = "\n".join([f"spec {path} does not load:", *problems, fix])
    listing = "```text\n" + "\n".join(problems) + "\n```"  # verbatim: crons and table names hold `*` and `_`
    doc = "\n\n".join([f"# {dag_id}: broken spec", f"Spec: `{path}`", listing, fix])
    with DAG(
        dag_id=dag_id,
        schedule=None,
        max_active_runs=1,
        tags=["millpond", "broken-spec"],
        description=summary + ":\n" + "\n".join(problems),
        is_paused_upon_creation=True,
        doc_md=doc,
        default_args={"owner": "millpond", "retries": 0},
        auto_register=False,
    ) as dag:
        SpecProblemsOperator(task_id="spec_problems", problems=text)
    return dag


def build_freshness_dag(tables: list[str], alerting: Alerting) -> DAG:
    """The sentinel: every few minutes (MILLPOND_FRESHNESS_SCHEDULE) it checks each table with a freshness goal, no
    Spark, whatever the pipelines' DAGs are doing, and records and notifies each change (docs/freshness.md)."""
    cron = settings.FRESHNESS_SCHEDULE.value()
    doc = (
        f"# {FRESHNESS_DAG_ID}\n\nChecks every table with a freshness goal ({cron}, UTC), also while a pipeline's DAG "
        "is paused: each status change becomes a row of `_system/freshness`, and the notifier is called once when "
        "a table turns stale and once when it recovers.\n\n" + "\n".join(f"- `{t}`" for t in tables)
    )
    with DAG(
        dag_id=FRESHNESS_DAG_ID,
        schedule=CronTriggerTimetable(cron, timezone="UTC", run_immediately=True),
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=["millpond", "freshness"],
        is_paused_upon_creation=False,  # a sentinel left paused (Airflow's default for new DAGs) would say nothing
        doc_md=doc,
        default_args={"owner": "millpond", "retries": 0},
        auto_register=False,
    ) as dag:
        FreshnessSentinelOperator(task_id="check_freshness", alerting=alerting, execution_timeout=timedelta(minutes=4))
    return dag


def build_all(module_doc: str = "", project: Path | None = None, alerting: Alerting | None = None) -> dict[str, DAG]:
    """Every spec in the project's pipelines/ as a DAG; a spec that does not load as a paused DAG naming its problems;
    and the freshness sentinel when a table has a goal.

    `project` is the folder the DAG file belongs to: Airflow parses and runs it from any working directory.
    MILLPOND_PROJECT, when set, wins. `alerting`: the notifier for freshness and deadline alerts (default:
    MILLPOND_ALERT_FILE, else a log line), e.g. `Alerting("airflow.providers.smtp.notifications.smtp.SmtpNotifier",
    {"to": "oncall@example.com", "subject": "{{ freshness.table }} is {{ freshness.status }}"})`.
    """
    if project is not None:
        process_env.default_for_process(settings.PROJECT.name, str(project))
    alerting = alerting or Alerting.from_settings()
    dags = {}
    goals: list[str] = []
    for path in all_spec_paths():
        try:
            pipeline = load_pipeline(path)
            built = [build_dag(pipeline, module_doc, alerting=alerting)]
            if pipeline.reprocess_schedule:
                built.append(build_dag(pipeline, module_doc, reprocessing=True, alerting=alerting))
            # Airflow's own checks, which the DagBag runs next: there a failure is an import error of the DAG file
            # that names no spec (e.g. a five-field cron the loader let through with a field out of range).
            for dag in built:
                dag.validate()
        except SpecError as exc:
            problems = exc.problems
        except Exception as exc:
            problems = [f"{path}: Airflow refuses the DAG: {type(exc).__name__}: {exc}. Fix: correct the spec"]
        else:
            dags.update({dag.dag_id: dag for dag in built})
            goals += [table.id for table in pipeline.tables.values() if table.freshness]
            continue
        log.error(
            "Pipeline spec %s does not load; its DAG is paused and lists the problems:\n%s", path, "\n".join(problems)
        )
        dag = broken_spec_dag(path, problems)
        dags[dag.dag_id] = dag
    if goals:
        dags[FRESHNESS_DAG_ID] = build_freshness_dag(goals, alerting)
    return dags
