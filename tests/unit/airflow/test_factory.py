"""Every spec becomes a DAG that imports fast, without heavy modules, with the task graph the factory promises."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from millpond import settings
from millpond.runs import run_summary
from millpond.spec import all_spec_paths, load_pipeline
from tests.support import REPO

pytestmark = pytest.mark.unit

PARSE = """
import json, sys, time
started = time.monotonic()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags),
                  "seconds": time.monotonic() - started,
                  "heavy": [m for m in sys.argv[2:] if m in sys.modules]}))
"""


PIPELINE_GRAPH = {"ingest": ["quality_gate"], "quality_gate": ["gold"], "gold": ["run_summary"], "run_summary": []}


def task_graph(dag):
    return {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


@pytest.fixture(scope="module")
def pipelines():
    return [load_pipeline(p) for p in all_spec_paths()]


def test_dag_files_import_without_errors_quickly_and_without_heavy_modules():
    # Loaded only when a task runs: the Spark provider (it pulls in `requests`), the TaskFlow operators, delta-rs.
    heavy = [
        "pyspark",
        "delta",
        "deltalake",
        "great_expectations",
        "pandas",
        "requests",
        "airflow.providers.apache.spark.hooks.spark_submit",
        "airflow.providers.standard.operators.python",
    ]
    out = subprocess.run(
        [sys.executable, "-c", PARSE, str(REPO / "dags"), *heavy],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == {}
    specs = [load_pipeline(p) for p in all_spec_paths()]
    assert result["dags"] == sorted(
        [p.name for p in specs]
        + [f"{p.name}__reprocess" for p in specs if p.reprocess_schedule]
        + ["millpond_freshness"]  # the examples have freshness goals (activity, device_status)
    )
    assert result["heavy"] == [], "DAG parsing imported heavy modules"
    assert result["seconds"] < 20, f"parsing took {result['seconds']:.1f}s (airflow import included)"


def test_each_pipeline_task_graph_matches_its_spec(dagbag, pipelines):
    for pipeline in pipelines:
        dag = dagbag.dags[pipeline.name]
        assert task_graph(dag) == PIPELINE_GRAPH
        assert dag.max_active_runs == 1 and dag.catchup == pipeline.catchup
        assert dag.start_date.date() == pipeline.start_date and dag.start_date.tzinfo is not None
        assert set(pipeline.tags) | {"millpond"} <= set(dag.tags)
        assert dag.doc_md and pipeline.name in dag.doc_md
        assert all(t.retries == pipeline.retries for t in dag.tasks)
        assert dag.params["full_refresh"] == []
        ingest, gold = dag.get_task("ingest"), dag.get_task("gold")
        assert ingest.application_args[:3] == [pipeline.name, "--layers", "bronze,silver"]
        assert "--defer-gate-failure" in ingest.application_args
        assert gold.application_args[:3] == [pipeline.name, "--layers", "gold"]
        assert ingest.application.endswith("millpond/driver/runner.py") and ingest._conn_id == "spark_millpond"

        def outlets(task_id, dag=dag):
            return sorted(a.name for a in dag.get_task(task_id).outlets)

        assert outlets("ingest") == sorted(f"delta.{t}" for t in pipeline.layer_tables("bronze"))
        assert outlets("quality_gate") == sorted(f"delta.{t}" for t in pipeline.layer_tables("silver"))
        assert outlets("gold") == sorted(f"delta.{t}" for t in pipeline.layer_tables("gold"))


def test_schedule_is_the_spec_cron_with_data_intervals(dagbag):
    dag = dagbag.dags["activity"]  # @hourly in the spec
    assert type(dag.timetable).__name__ == "CronDataIntervalTimetable"
    assert dag.timetable.expression == "0 * * * *" and str(dag.timetable.timezone) in ("UTC", "Timezone('UTC')")


def render(dag, task_id, params, run_type="scheduled", interval=True):
    from datetime import UTC, datetime

    task = dag.get_task(task_id)
    context = {
        "dag": dag,
        "run_id": "scheduled__2026-11-01T01:00:00+00:00",
        "dag_run": SimpleNamespace(run_type=run_type),
        "params": {"full_refresh": params},
    }
    if interval:  # Airflow 3 leaves both keys out of the context of a run without a logical date
        context["data_interval_start"] = datetime(2026, 11, 1, 1, tzinfo=UTC)
        context["data_interval_end"] = datetime(2026, 11, 1, 2, tzinfo=UTC)
    args = task.render_template(task.application_args, context, dag.get_template_env())
    return dict(zip(args[1::2], args[2::2], strict=False)) | {"_args": args}


def test_run_id_and_data_interval_reach_the_job_as_templated_arguments(dagbag):
    args = render(dagbag.dags["activity"], "ingest", [])
    assert args["--run-id"] == "scheduled__2026-11-01T01:00:00+00:00"
    assert args["--trigger"] == "scheduled"
    assert args["--data-interval-start"] == "2026-11-01T01:00:00+00:00"
    assert args["--data-interval-end"] == "2026-11-01T02:00:00+00:00"
    assert args["--full-refresh"] == ""


def test_a_run_without_a_logical_date_renders_no_interval_in_every_task(dagbag, pipelines):
    """The REST API's default (`logical_date: null`) and the UI's trigger without a date: no data interval."""
    for pipeline in pipelines:
        for task_id in ("ingest", "gold"):
            args = render(dagbag.dags[pipeline.name], task_id, [], run_type="manual", interval=False)
            assert (args["--trigger"], args["--data-interval-start"], args["--data-interval-end"]) == (
                "manual",
                "none",
                "none",
            ), (pipeline.name, task_id, args)
    assert args["--full-refresh"] == ""


def test_full_refresh_goes_to_the_first_application_owning_a_chosen_table(dagbag):
    dag = dagbag.dags["activity"]
    assert render(dag, "ingest", ["silver.activity"])["--full-refresh"] == "silver.activity"
    assert render(dag, "gold", ["silver.activity"])["--full-refresh"] == ""  # rebuilt downstream by ingest
    assert render(dag, "ingest", ["gold.device_counts"])["--full-refresh"] == ""
    assert render(dag, "gold", ["gold.device_counts"])["--full-refresh"] == "gold.device_counts"


def test_every_delta_table_is_an_asset_other_dags_can_schedule_on(pipelines):
    from millpond.airflow.assets import table_asset

    asset = table_asset("silver.activity")
    assert asset.name == "delta.silver.activity"
    assert asset.uri == "x-millpond://silver/activity"
    assert str(settings.lake_root()) not in asset.uri  # the same asset wherever the lake is (docs/airflow.md)


def test_missing_spark_connection_is_a_clear_error_not_yarn(monkeypatch):
    from airflow.sdk.exceptions import AirflowException

    from millpond.airflow.spark_app import spark_master

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_MILLPOND", '{"conn_type": "spark", "host": "local[2]"}')
    assert spark_master() == "local[2]"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_MILLPOND", "spark://127.0.0.1:7077")
    assert spark_master() == "spark://127.0.0.1:7077"
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_MILLPOND")
    with pytest.raises(AirflowException, match="AIRFLOW_CONN_SPARK_MILLPOND"):
        spark_master()


def test_gate_failure_message_names_suite_expectation_count_and_report():
    from millpond.airflow.operators import gate_failures

    summary = {
        "tables": [
            {"table": "bronze.activity", "outcome": "succeeded"},
            {
                "table": "silver.activity",
                "outcome": "gate_failed",
                "gate": {
                    "suite": "activity.silver.activity",
                    "report_path": "/lake/_reports/x.html",
                    "failed_expectations": [
                        {
                            "expectation": "expect_column_values_to_not_be_null",
                            "column": "gt",
                            "severity": "critical",
                            "unexpected_count": 7,
                        }
                    ],
                },
            },
        ]
    }
    (message,) = gate_failures(summary)
    for part in (
        "silver.activity",
        "activity.silver.activity",
        "expect_column_values_to_not_be_null",
        "unexpected=7",
        "/lake/_reports/x.html",
    ):
        assert part in message
    assert gate_failures({"tables": [{"table": "t", "outcome": "succeeded"}]}) == []


def test_a_kafka_dag_without_its_broker_address_fails_its_run_naming_the_variable(dagbag, monkeypatch, tmp_path):
    """`make up`/`make demo` set no MILLPOND_KAFKA_BOOTSTRAP: device_status still loads, and its ingest task fails
    before any Spark application with the runner's message, not only an exit code."""
    from airflow.sdk.exceptions import AirflowException

    monkeypatch.delenv("MILLPOND_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    task = dagbag.dags["device_status"].get_task("ingest")
    monkeypatch.setattr(task, "application_args", render(dagbag.dags["device_status"], "ingest", [])["_args"])
    with pytest.raises(AirflowException) as failed:
        task.run_without_spark()
    message = str(failed.value)
    assert "millpond runner exited 2 before any Spark application: invalid spec or arguments" in message
    assert "environment variable MILLPOND_KAFKA_BOOTSTRAP is not set" in message
    assert "Fix: export MILLPOND_KAFKA_BOOTSTRAP=" in message
    assert not (tmp_path / "lake" / "_system").exists()


def test_a_task_with_its_own_spark_conf_is_submitted_not_run_on_the_engine(dagbag, monkeypatch, tmp_path):
    """Only a new JVM applies a task's own Spark conf: with SPARK_REMOTE set, such a task still uses spark-submit,
    which must then not see SPARK_REMOTE (spark-submit would read it as its --remote)."""
    import os

    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost:1/;token=t")
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    task = dagbag.dags["activity"].get_task("ingest")
    monkeypatch.setattr(task, "conf", {"spark.driver.memory": "3g"})
    assert task.run_on_engine() is False
    seen = {}

    class SparkSubmitSeen:
        """Where spark-submit would start: what it would find in the environment."""

        def submit(self, application: str) -> None:
            seen["SPARK_REMOTE"] = os.environ.get("SPARK_REMOTE")

    monkeypatch.setattr(task, "build_hook", SparkSubmitSeen)
    monkeypatch.setattr(task, "choose_driver_jit", lambda: None)  # it reads the rendered interval arguments
    task.submit()
    assert seen == {"SPARK_REMOTE": None}
    assert os.environ["SPARK_REMOTE"] == "sc://localhost:1/;token=t"  # later tasks of this process still see it


def test_the_engine_comes_from_the_airflow_connection_before_spark_remote(monkeypatch):
    """`make up` defines the engine as the Airflow connection `millpond engine start --airflow-connection` prints: a
    task turns it back into the very SPARK_REMOTE that command prints without the flag, and it wins over the worker's
    own SPARK_REMOTE; without the connection the worker's SPARK_REMOTE names the engine, and with neither, none."""
    from millpond.airflow.spark_app import engine_remote
    from millpond.driver.connect_server import EngineState

    state = EngineState(4242, 15123, "127.0.0.1", "tok-en_1", "f", {}, "2026-11-28T00:00:00Z", "/tmp/engine.log")
    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:1/;token=old")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_MILLPOND", state.airflow_connection)
    assert engine_remote() == state.remote == "sc://localhost:15123/;token=tok-en_1"
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_CONNECT_MILLPOND")
    assert engine_remote() == "sc://elsewhere:1/;token=old"
    monkeypatch.delenv("SPARK_REMOTE")
    assert engine_remote() is None


def test_an_engine_connection_airflow_cannot_read_is_an_error_not_spark_submit(monkeypatch):
    """Airflow reports an unreadable connection as not defined: one set in the environment but malformed must fail
    the task naming the variable and the fix, not send it quietly to spark-submit."""
    from airflow.sdk.exceptions import AirflowException

    from millpond.airflow.spark_app import engine_remote

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_MILLPOND", '{"conn_type": "spark_connect", "host": "localh')
    with pytest.raises(
        AirflowException, match=r"AIRFLOW_CONN_SPARK_CONNECT_MILLPOND is set, but .*--airflow-connection"
    ):
        engine_remote()


def test_a_task_on_the_engine_of_the_connection_gives_its_runner_that_engine(dagbag, monkeypatch, tmp_path):
    """The runner process a task starts on the engine gets the connection's URL as its SPARK_REMOTE, and only it:
    the task's own environment is left as it was."""
    import os
    import subprocess

    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:1/;token=old")  # the worker's own, which the connection beats
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_CONNECT_MILLPOND",
        '{"conn_type": "spark_connect", "host": "localhost", "port": 15123, "password": "t"}',
    )
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    started: dict = {}

    class Finished:
        stdout: list[str] = []

        def __init__(self, command, env, **kwargs):
            started.update(command=command, env=env)

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", Finished)
    task = dagbag.dags["activity"].get_task("ingest")
    assert task.run_on_engine() is True
    assert started["command"][1:3] == ["-m", "millpond.driver.runner"]
    assert started["env"]["SPARK_REMOTE"] == "sc://localhost:15123/;token=t"
    assert os.environ["SPARK_REMOTE"] == "sc://elsewhere:1/;token=old"  # the task's own environment is left alone


def test_a_kafka_pipeline_without_its_broker_address_is_created_paused_and_says_why(pipelines, monkeypatch):
    """`make up` unpauses DAGs at creation; one that cannot succeed without its broker stays paused, with the reason."""
    from millpond.airflow.factory import build_dag

    monkeypatch.delenv("MILLPOND_KAFKA_BOOTSTRAP", raising=False)
    paused = {p.name: build_dag(p) for p in pipelines}
    assert {name for name, dag in paused.items() if dag.is_paused_upon_creation} == {"device_status"}
    assert paused["device_status"].description.startswith("Paused: needs MILLPOND_KAFKA_BOOTSTRAP (a Kafka broker;")
    monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    device = build_dag(next(p for p in pipelines if p.name == "device_status"))
    assert device.is_paused_upon_creation is None and device.description is None


BROKEN_SPEC = """
pipeline: orders
schedule: every hour
start_date: 2026-11-01
tables:
  bronze.orders:
    from: landing.nowhere
    colour: blue
"""


def test_a_broken_spec_shows_its_problems_and_hides_no_other_pipelines_dag(monkeypatch, tmp_path, caplog):
    """One bad YAML file used to be an import error of the DAG file, and every pipeline's DAG disappeared."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowException

    from millpond.spec import SpecError

    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    shutil.copy(REPO / "pipelines" / "activity.yaml", pipelines_dir)
    broken = pipelines_dir / "orders.yaml"
    broken.write_text(BROKEN_SPEC)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(pipelines_dir))
    with pytest.raises(SpecError) as loading:
        load_pipeline(broken)
    problems = loading.value.problems
    assert len(problems) >= 3 and all(p.startswith(f"{broken}: ") and "Fix: " in p for p in problems)

    with caplog.at_level(logging.ERROR, logger="millpond.airflow.factory"):
        bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert sorted(bag.dags) == ["activity", "activity__reprocess", "millpond_freshness", "orders"]
    good = bag.dags["activity"]
    assert task_graph(good) == PIPELINE_GRAPH and good.is_paused_upon_creation is None
    assert good.get_task("gold").application_args[:3] == ["activity", "--layers", "gold"]

    dag = bag.dags["orders"]
    assert dag.is_paused_upon_creation is True and type(dag.timetable).__name__ == "NullTimetable"
    assert task_graph(dag) == {"spec_problems": []}
    assert all(p in dag.description and p in dag.doc_md for p in problems)
    with pytest.raises(AirflowException) as failed:
        dag.get_task("spec_problems").execute({})
    assert all(p in str(failed.value) for p in problems) and "make validate" in str(failed.value)
    assert all(p in caplog.text for p in problems)


def test_a_spec_too_broken_to_name_its_pipeline_gets_its_file_stem_as_dag_id(monkeypatch, tmp_path):
    from millpond.airflow.factory import build_all

    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    (pipelines_dir / "half_typed.yaml").write_text("pipeline: [unclosed\n")
    monkeypatch.setenv("MILLPOND_PIPELINES", str(pipelines_dir))
    dag = build_all()["half_typed"]
    assert "not valid YAML" in dag.description and dag.is_paused_upon_creation is True


def test_a_spec_airflow_refuses_names_its_file_not_the_dag_file(monkeypatch, tmp_path):
    """A schedule with five fields passes the loader; Airflow's own check of the cron would be the DAG file's error."""
    from airflow.dag_processing.dagbag import DagBag

    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    shutil.copy(REPO / "pipelines" / "clicks.yaml", pipelines_dir)
    spec = (REPO / "pipelines" / "activity.yaml").read_text().replace('schedule: "@hourly"', 'schedule: "61 * * * *"')
    (pipelines_dir / "activity.yaml").write_text(spec)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(pipelines_dir))
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {} and sorted(bag.dags) == ["activity", "clicks"]
    assert task_graph(bag.dags["clicks"]) == PIPELINE_GRAPH
    dag = bag.dags["activity"]
    assert task_graph(dag) == {"spec_problems": []}
    assert f"{pipelines_dir / 'activity.yaml'}: Airflow refuses the DAG: " in dag.description
    assert "[61 * * * *] is not acceptable" in dag.description


def test_a_backfill_run_reprocesses_its_interval_unless_its_conf_says_no():
    from airflow.sdk.exceptions import AirflowException

    from millpond.airflow.operators import reprocess_args, reprocess_interval

    def context(run_type, reprocess=None, interval=True):
        from datetime import UTC, datetime

        values = {
            "dag_run": SimpleNamespace(run_type=SimpleNamespace(value=run_type)),
            "params": {"reprocess": reprocess},
        }
        if interval:
            values |= {
                "data_interval_start": datetime(2026, 11, 1, 1, tzinfo=UTC),
                "data_interval_end": datetime(2026, 11, 2, 1, tzinfo=UTC),
            }
        return values

    assert reprocess_interval(context("backfill")) == "2026-11-01T01:00:00Z/2026-11-02T01:00:00Z"
    assert reprocess_interval(context("backfill", reprocess=False)) is None
    assert reprocess_interval(context("scheduled")) is None
    assert reprocess_interval(context("manual", reprocess=True)) == "2026-11-01T01:00:00Z/2026-11-02T01:00:00Z"
    with pytest.raises(AirflowException, match="has none. Fix: trigger it with a logical date"):
        reprocess_interval(context("manual", reprocess=True, interval=False))

    # Gone landing files take their rows only when the run's conf says so, and only with a reprocess.
    allowing = context("backfill") | {"params": {"allow_missing_files": True}}
    hour = "2026-11-01T01:00:00Z/2026-11-02T01:00:00Z"
    assert reprocess_args(allowing, hour) == ["--reprocess", hour, "--allow-missing-files"]
    assert reprocess_args(context("backfill"), hour) == ["--reprocess", hour]
    assert reprocess_args(allowing, None) == ["--reprocess", "none"]


def test_a_reprocess_schedule_adds_a_dag_with_the_same_tasks_on_that_schedule(dagbag):
    daily = dagbag.dags["activity__reprocess"]
    assert task_graph(daily) == task_graph(dagbag.dags["activity"]) == PIPELINE_GRAPH
    assert daily.timetable.expression == "0 0 * * *"
    assert daily.get_task("ingest").application_args[0] == "activity"  # the same pipeline, its lock and tables
    assert dagbag.dags["activity"].params["reprocess"] is None


def test_the_second_dag_records_its_runs_apart_from_the_main_dag(dagbag):
    """Both DAGs name a run by its interval's end: the daily run and the hourly run ending at midnight share an id."""
    assert render(dagbag.dags["activity"], "ingest", [])["--run-id"] == "scheduled__2026-11-01T01:00:00+00:00"
    daily = render(dagbag.dags["activity__reprocess"], "ingest", [])["--run-id"]
    assert daily == "activity__reprocess.scheduled__2026-11-01T01:00:00+00:00"
    assert run_summary.dag_run_key("activity__reprocess", "r") == ("activity", "activity__reprocess.r")
    assert run_summary.dag_run_key("activity", "r") == ("activity", "r")
