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

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule
from airflow.sdk.definitions.timetables.interval import CronDataIntervalTimetable

from millpond import settings
from millpond.airflow.assets import table_asset
from millpond.airflow.operators import (
    MillpondSparkSubmitOperator,
    QualityGateOperator,
    RunSummaryOperator,
)
from millpond.spec import Pipeline, SpecError, all_spec_paths, load_pipeline, unset_environment

INGEST_LAYERS = ("bronze", "silver")


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
