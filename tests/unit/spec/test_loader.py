"""Spec validation: every rejection names the file, the field and the fix, before any Spark starts."""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from millpond.driver import runner
from millpond.spec import KafkaSource, SpecError, all_spec_paths, function_problems, load_pipeline, validate_all
from millpond.spec.model import STATIC_FORMATS
from tests.support import REPO

pytestmark = pytest.mark.unit

ACTIVITY = yaml.safe_load((REPO / "pipelines" / "activity.yaml").read_text())


def write_spec(tmp_path: Path, spec: dict, name: str = "activity") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def problems_for(tmp_path: Path, mutate, base: dict = ACTIVITY) -> str:
    spec = copy.deepcopy(base)
    mutate(spec)
    path = write_spec(tmp_path, spec, name=base["pipeline"])
    with pytest.raises(SpecError) as caught:
        load_pipeline(path, lake_root=tmp_path / "lake")
    text = str(caught.value)
    assert str(path) in text  # every problem names the file
    assert "Fix:" in text
    return text


def assert_problem(text: str, field: str, message: str, fix: str) -> None:
    """The validator's line for `field` says what is wrong and how to fix it."""
    problem = next((line for line in text.splitlines() if f": {field}: " in line), "")
    assert message in problem, text
    assert fix in problem, text


def test_every_shipped_spec_is_valid():
    pipelines, problems = validate_all()
    assert problems == []
    assert {p.name for p in pipelines} == {p.stem for p in all_spec_paths()} >= {"activity"}


def test_activity_spec_loads_into_frozen_objects_in_dependency_order(tmp_path):
    pipeline = load_pipeline(REPO / "pipelines" / "activity.yaml", lake_root=tmp_path)
    assert list(pipeline.tables) == ["bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly"]
    silver = pipeline.table("silver/activity")  # the lake-path spelling works too
    assert silver.dedup_keys == ("Device", "Index", "Recorded_At")
    assert silver.watermark.delay == "1 hour"
    assert pipeline.tables["gold.activity_hourly"].aggregate.window.alias == "hour"
    assert pipeline.downstream(["silver.activity"]) == ["silver.activity", "gold.device_counts", "gold.activity_hourly"]
    with pytest.raises(AttributeError):
        silver.output_mode = "complete"  # frozen


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (
            lambda s: s["tables"]["silver.activity"].update(dedupe={"keys": ["Device"]}),
            "tables.silver.activity.dedupe",
            "unknown field 'dedupe'",
        ),
        (lambda s: s.update(schedul="@daily"), "schedul", "unknown field"),
        (lambda s: s["sources"]["activity"].update(format="avro"), "sources.activity.format", "unknown format 'avro'"),
        (lambda s: s["sources"]["activity"].pop("schema"), "sources.activity.schema", "needs a schema"),
        (
            lambda s: s["sources"]["activity"].update(schema="Device STRNG"),
            "sources.activity.schema",
            "is not 'name TYPE'",
        ),
        (
            lambda s: s["tables"]["gold.device_counts"].pop("aggregate"),
            "tables.gold.device_counts.output_mode",
            "complete mode needs an aggregation",
        ),
        (
            lambda s: s["tables"]["gold.activity_hourly"].update(output_mode="append"),
            "tables.gold.activity_hourly.aggregate",
            "needs a watermark",
        ),
        (
            lambda s: s["tables"]["silver.activity"].update(order_by=["Device"]),
            "tables.silver.activity.order_by",
            "sorting a stream",
        ),
        (
            lambda s: s["tables"]["silver.activity"]["transform"].update(sql="SELECT * FROM source ORDER BY Device"),
            "tables.silver.activity.transform.sql",
            "ORDER BY on a stream",
        ),
        (
            lambda s: s["tables"]["gold.device_counts"].update({"from": "silver.activty"}),
            "tables.gold.device_counts.from",
            "unknown source or table 'silver.activty'",
        ),
        (
            lambda s: s["tables"]["bronze.activity"].update({"from": "gold.device_counts"}),
            "tables.bronze.activity.from",
            "tables form a cycle",
        ),
        (
            lambda s: s["sources"]["activity"].update(path="../../etc"),
            "sources.activity.path",
            "points outside the lake root",
        ),
        (lambda s: s["sources"]["activity"].update(path="/var/data"), "sources.activity.path", "is absolute"),
        (
            lambda s: s["sources"]["activity"].update(path="landing/activity[1]"),
            "sources.activity.path",
            "holds [ ], which Spark's file source reads as a glob pattern",
        ),
        (
            lambda s: s["tables"]["silver.activity"].pop("watermark"),
            "tables.silver.activity.dedup",
            "without a watermark",
        ),
        (
            lambda s: s["tables"]["silver.activity"]["watermark"].update(delay="an hour"),
            "tables.silver.activity.watermark.delay",
            "is not a duration",
        ),
        (
            lambda s: s["tables"]["silver.activity"].update(trigger="continuous"),
            "tables.silver.activity.trigger",
            "is not a trigger",
        ),
        (
            lambda s: s["tables"]["silver.activity"].update(transform={"function": "no_such_module:clean"}),
            "tables.silver.activity.transform.function",
            "not found",
        ),
        (lambda s: s.update(schedule="every hour"), "schedule", "is not a schedule"),
        (
            lambda s: s["sources"]["activity"].update(rate_limit={"max_files_per_trigger": 0}),
            "sources.activity.rate_limit.max_files_per_trigger",
            "whole number",
        ),
        (
            lambda s: s["tables"].update({"platinum.x": {"from": "gold.device_counts"}}),
            "tables.platinum.x",
            "is not '<layer>.<name>'",
        ),
        (
            lambda s: s["tables"]["bronze.activity"].update(dedup={"keys": ["Device"]}),
            "tables.bronze.activity",
            "ingests them as they are",
        ),
        (
            lambda s: s["tables"]["silver.activity"].update(expectations="activity_suite"),
            "tables.silver.activity.expectations",
            "breaks the naming scheme",
        ),
        (
            lambda s: s["tables"]["bronze.activity"].update(expectations="activity.bronze.activity"),
            "tables.bronze.activity.expectations",
            "cannot be gated",
        ),
        (
            lambda s: s["sources"]["activity"].update(schema_drift="evolve"),
            "sources.activity.schema_drift",
            "unknown policy 'evolve'",
        ),
        (
            lambda s: s["sources"]["activity"].update(format="csv", schema_drift="add"),
            "sources.activity.schema_drift",
            "schema_drift applies to json sources only, not csv",
        ),
    ],
)
def test_rejections_name_field_and_fix(tmp_path, mutate, field, message):
    text = problems_for(tmp_path, mutate)
    assert f": {field}: " in text
    assert message in text


def test_a_format_that_needs_a_reader_option_refuses_a_spec_without_it(tmp_path, monkeypatch):
    """A format's required reader options (millpond.spec.model.FILE_SOURCE_FORMATS) are checked before Spark
    starts; here csv is made to need one."""
    from millpond.spec import model

    monkeypatch.setitem(model.FILE_SOURCE_FORMATS, "csv", ("sep",))
    text = problems_for(tmp_path, lambda s: s["sources"]["activity"].update(format="csv"))
    assert "sources.activity.options.sep" in text and "a csv source needs the reader option 'sep'" in text
    dimension = problems_for(tmp_path, lambda s: s["sources"]["activity"].update(format="csv", static=True))
    assert "sources.activity.options.sep" in dimension  # a dimension is read with the same reader options
    spec = copy.deepcopy(ACTIVITY)
    spec["sources"]["activity"].update(format="csv", options={"sep": ";"})
    assert (
        load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake").sources["landing.activity"].format
        == "csv"
    )


def test_all_problems_are_reported_at_once(tmp_path):
    def two_problems(spec):
        spec["sources"]["activity"]["format"] = "avro"
        spec["tables"]["gold.device_counts"]["from"] = "nowhere.table"

    text = problems_for(tmp_path, two_problems)
    assert "unknown format" in text and "unknown source or table" in text


def test_unknown_field_suggests_the_closest_name(tmp_path):
    text = problems_for(tmp_path, lambda s: s["tables"]["silver.activity"].update(watermerk={}))
    assert "did you mean 'watermark'?" in text


def test_cli_validate_rejects_before_spark_starts(tmp_path):
    spec = copy.deepcopy(ACTIVITY)
    spec["tables"]["gold.device_counts"].pop("aggregate")
    write_spec(tmp_path, spec)
    env = {"MILLPOND_PIPELINES": str(tmp_path), "MILLPOND_LAKE": str(tmp_path / "lake"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "millpond.cli", "validate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "complete mode needs an aggregation" in done.stderr
    run = subprocess.run(
        [sys.executable, "-m", "millpond.cli", "run", "activity"], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2
    assert "complete mode needs an aggregation" in run.stderr
    assert not (tmp_path / "lake" / "_system").exists()  # nothing started, nothing written


def test_a_lake_root_spark_would_read_as_a_pattern_is_refused_before_spark_starts(tmp_path):
    """Seen before the check: with MILLPOND_LAKE=.../lake[1], bronze ingested the files of .../lake1 (Hadoop read
    `[1]` as a character class), then the event log's delta-rs write panicked on the path."""
    write_spec(tmp_path, ACTIVITY)
    lake, lookalike = tmp_path / "lake[1]", tmp_path / "lake1"
    for root in (lake, lookalike):
        (root / "landing" / "activity").mkdir(parents=True)
        (root / "landing" / "activity" / "a.json").write_text('{"Device": "d", "Index": 1}\n')
    env = {"MILLPOND_PIPELINES": str(tmp_path), "MILLPOND_LAKE": str(lake), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-m", "millpond.cli", "run", "activity"], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2, run.stderr
    assert f"lake root: {lake} holds [ ], which Spark's file source reads as a glob pattern" in run.stderr
    assert "Fix: move the lake to a folder whose path has none of" in run.stderr
    assert sorted(p.name for p in lake.iterdir()) == sorted(p.name for p in lookalike.iterdir()) == ["landing"]


def test_two_pipelines_writing_one_table_are_rejected(tmp_path, monkeypatch):
    write_spec(tmp_path, ACTIVITY)
    other = copy.deepcopy(ACTIVITY)
    other["pipeline"] = "other"
    other["tables"]["silver.activity"].pop("expectations")  # its suite would be named other.silver.activity
    write_spec(tmp_path, other, name="other")
    monkeypatch.setenv("MILLPOND_PIPELINES", str(tmp_path))
    _, problems = validate_all(tmp_path / "lake")
    assert any("also written by pipeline 'activity'" in p for p in problems)


def test_schema_drift_defaults_to_rescue_and_accepts_each_policy(tmp_path):
    assert load_pipeline(REPO / "pipelines" / "activity.yaml", tmp_path).sources["landing.activity"].schema_drift == (
        "rescue"
    )
    for policy in ("rescue", "add", "fail"):
        spec = copy.deepcopy(ACTIVITY)
        spec["sources"]["activity"]["schema_drift"] = policy
        pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
        assert pipeline.sources["landing.activity"].schema_drift == policy
    text = problems_for(tmp_path, lambda s: s["sources"]["activity"].update(schema_drift="evolve"))
    assert "Fix: use rescue (default: keep new fields as JSON in _rescued_data), add" in text


def hourly_in(mode: str, **changes):
    """Mutation: gold.activity_hourly in another output mode (plus any field changes)."""
    return lambda s: s["tables"]["gold.activity_hourly"].update(output_mode=mode, **changes)


def windowed(**window):
    return lambda s: (hourly_in("update")(s), s["tables"]["gold.activity_hourly"]["aggregate"]["window"].update(window))


@pytest.mark.parametrize(
    ("mutate", "field", "message", "fix"),
    [
        (
            lambda s: (hourly_in("update")(s), s["tables"]["gold.activity_hourly"].pop("keys")),
            "tables.gold.activity_hourly.keys",
            "update mode MERGEs each batch into the table on its keys",
            "Fix: add keys: [hour, gt]",
        ),
        (
            hourly_in("update", keys=["gt"]),
            "tables.gold.activity_hourly.keys",
            "[gt] is not the window alias plus group_by",
            "Fix: set keys: [hour, gt]",
        ),
        (
            hourly_in("update", keys=["hour", "gt", "Device"]),
            "tables.gold.activity_hourly.keys",
            "is not the window alias plus group_by",
            "Fix: set keys: [hour, gt]",
        ),
        (
            lambda s: s["tables"]["bronze.activity"].update(output_mode="update"),
            "tables.bronze.activity.output_mode",
            "has no aggregate (nor dedup)",
            "Fix: use output_mode: append",
        ),
        (
            lambda s: s["tables"]["gold.device_counts"].update(output_mode="update", expectations="activity.x"),
            "tables.gold.device_counts.expectations",
            "a gate cannot set rows of an update-mode table aside",
            "Fix: gate the upstream table, or use output_mode: append or complete",
        ),
        (
            windowed(slide="2 hours"),
            "tables.gold.activity_hourly.aggregate.window.slide",
            "slide '2 hours' is longer than the window duration '1 hour'",
            "Fix: use a slide no longer than the duration",
        ),
        (
            hourly_in("append", watermark={"column": "_ingested_at", "delay": "1 hour"}),
            "tables.gold.activity_hourly.aggregate.window.column",
            "the window is on 'Recorded_At' and the watermark on '_ingested_at'",
            "Fix: window on _ingested_at",
        ),
        (
            lambda s: s["tables"]["gold.device_counts"].update(output_mode="append"),
            "tables.gold.device_counts.aggregate",
            "needs a watermark",
            "Fix: add 'watermark: ",
        ),
        (
            lambda s: s["tables"]["gold.device_counts"].update(
                output_mode="append", watermark={"column": "Recorded_At", "delay": "1 hour"}
            ),
            "tables.gold.device_counts.aggregate",
            "must group by the watermark column 'Recorded_At'",
            "Fix: add window: {column: Recorded_At",
        ),
        (
            lambda s: s["tables"]["silver.activity"].update(output_mode="complete"),
            "tables.silver.activity.output_mode",
            "complete mode needs an aggregation",
            "Fix: add an 'aggregate:' block",
        ),
    ],
)
def test_output_mode_and_window_rules_name_field_and_fix(tmp_path, mutate, field, message, fix):
    assert_problem(problems_for(tmp_path, mutate), field, message, fix)


def test_update_mode_and_windows_that_follow_the_rules_load(tmp_path):
    spec = copy.deepcopy(ACTIVITY)
    hourly_in("update", keys=["gt", "hour"])(spec)  # key order does not matter
    spec["tables"]["gold.activity_hourly"]["aggregate"]["window"]["slide"] = "30 minutes"
    spec["tables"]["silver.activity"]["output_mode"] = "update"
    spec["tables"]["silver.activity"].pop("expectations")
    pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
    hourly, silver = pipeline.tables["gold.activity_hourly"], pipeline.tables["silver.activity"]
    assert hourly.merges and hourly.query_output_mode == "update"
    assert hourly.aggregate_keys == ("hour", "gt") and hourly.aggregate.window.slide == "30 minutes"
    assert not silver.merges and silver.query_output_mode == "append"  # dedup: update emits what append does


def with_sink(table_id: str, fmt: str = "parquet", **changes):
    """Mutation: one table of the activity spec written by a file sink (plus any field changes)."""
    return lambda s: s["tables"][table_id].update(sink={"format": fmt}, **changes)


def without_gate_with_sink(s):
    s["tables"]["silver.activity"].pop("expectations")
    with_sink("silver.activity")(s)


@pytest.mark.parametrize(
    ("mutate", "field", "message", "fix"),
    [
        (
            with_sink("gold.device_counts"),
            "tables.gold.device_counts.output_mode",
            "a parquet file sink writes in append mode only",
            "Fix: use output_mode: append",
        ),
        (
            with_sink("gold.activity_hourly", "csv", output_mode="update", keys=["hour", "gt"]),
            "tables.gold.activity_hourly.output_mode",
            "not update",
            "Fix: use output_mode: append",
        ),
        (
            with_sink("silver.activity", "json"),
            "tables.silver.activity.expectations",
            "cannot gate a file sink",
            "Fix: gate the Delta table this one reads, or drop 'sink:'",
        ),
        (
            with_sink("bronze.activity"),
            "tables.bronze.activity.sink",
            "a table reading landing files splits",
            "Fix: keep bronze.activity on Delta and add a table with 'from: bronze.activity' and this sink",
        ),
        (
            without_gate_with_sink,
            "tables.gold.device_counts.from",
            "silver.activity writes parquet files, and tables read their upstream as a Delta stream",
            "Fix: read bronze.activity instead",
        ),
        (
            with_sink("gold.device_counts", "orc"),
            "tables.gold.device_counts.sink.format",
            "unknown sink format 'orc'",
            "Fix: use one of delta, json, csv, parquet",
        ),
        (
            lambda s: s["tables"]["gold.device_counts"].update(sink={"format": "delta", "options": {"header": "true"}}),
            "tables.gold.device_counts.sink.options",
            "writer options apply to file sinks only",
            "Fix: remove them",
        ),
        (
            lambda s: s["tables"]["gold.device_counts"].update(sink={"fromat": "json"}),
            "tables.gold.device_counts.sink.fromat",
            "unknown field 'fromat'",
            "did you mean 'format'?",
        ),
    ],
)
def test_file_sink_rules_name_field_and_fix(tmp_path, mutate, field, message, fix):
    assert_problem(problems_for(tmp_path, mutate), field, message, fix)


def test_file_sinks_in_append_mode_load_aggregates_with_a_watermark_included(tmp_path):
    spec = copy.deepcopy(ACTIVITY)
    spec["tables"]["gold.export"] = {"from": "silver.activity", "sink": {"format": "parquet"}}
    spec["tables"]["gold.hourly_files"] = {
        "from": "silver.activity",
        "sink": {"format": "csv", "options": {"header": "true"}},
        "watermark": {"column": "Recorded_At", "delay": "1 hour"},
        "aggregate": {
            "window": {"column": "Recorded_At", "duration": "1 hour", "as": "hour"},
            "measures": {"recordings": "count(*)"},
        },
    }
    spec["tables"]["gold.device_counts"]["sink"] = {"format": "delta"}  # explicit default
    pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
    export, hourly = pipeline.tables["gold.export"], pipeline.tables["gold.hourly_files"]
    assert export.sink.format == "parquet" and export.sink.is_file and not export.sink.options
    assert hourly.sink.options == {"header": "true"} and hourly.aggregate is not None
    assert not pipeline.tables["gold.device_counts"].sink.is_file
    assert not pipeline.tables["silver.activity"].sink.is_file  # no sink: Delta, as before


KAFKA_SPEC = {
    "pipeline": "devices",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "sources": {
        "events": {
            "format": "kafka",
            "bootstrap_servers": "${MILLPOND_KAFKA_BOOTSTRAP}",
            "subscribe": ["device_events"],
            "schema": "device STRING, ts TIMESTAMP, temp DOUBLE",
            "starting_offsets": "earliest",
            "rate_limit": {"max_offsets_per_trigger": 1000},
        }
    },
    "tables": {
        "bronze.events": {"from": "kafka.events"},
        "gold.alerts": {
            "from": "bronze.events",
            "transform": {"sql": "SELECT * FROM source WHERE temp > 30"},
            "sink": {
                "format": "kafka",
                "topic": "device_alerts",
                "key": "device",
                "bootstrap_servers": "${MILLPOND_KAFKA_BOOTSTRAP}",
            },
        },
    },
}


def kafka_source(**changes):
    return lambda s: s["sources"]["events"].update(changes)


def kafka_sink(**changes):
    return lambda s: s["tables"]["gold.alerts"]["sink"].update(changes)


def test_a_kafka_source_and_sink_load_with_their_defaults(tmp_path):
    spec = copy.deepcopy(KAFKA_SPEC)
    spec["sources"]["events"]["starting_offsets"] = {"device_events": {0: 5, 1: -2}}
    spec["sources"]["events"]["options"] = {"kafka.security.protocol": "SASL_SSL"}
    pipeline = load_pipeline(write_spec(tmp_path, spec, "devices"), lake_root=tmp_path / "lake")
    source = pipeline.sources["kafka.events"]
    assert isinstance(source, KafkaSource) and source.topics == ("device_events",)
    assert source.starting_offsets == '{"device_events": {"0": 5, "1": -2}}'  # Spark's JSON form
    assert source.rate_limit.reader_options() == {"maxOffsetsPerTrigger": "1000"}
    assert source.options == {"kafka.security.protocol": "SASL_SSL"} and source.schema_drift == "rescue"
    bronze, alerts = pipeline.tables["bronze.events"], pipeline.tables["gold.alerts"]
    assert bronze.reads_kafka and bronze.reads_source and not bronze.reads_landing
    sink = alerts.sink
    assert sink.is_kafka and not sink.is_file and not sink.is_delta
    assert (sink.topic, sink.key, sink.value) == ("device_alerts", "device", "to_json(struct(*))")
    del spec["sources"]["events"]["starting_offsets"]
    assert load_pipeline(write_spec(tmp_path, spec, "devices"), tmp_path).sources["kafka.events"].starting_offsets == (
        "earliest"
    )


# ---------------------------------------------------------------------------------------------- joins

CLICKS_TEXT = (REPO / "pipelines" / "clicks.yaml").read_text()
CLICKS = yaml.safe_load(CLICKS_TEXT)
JOINED = "silver.impression_clicks"


def join_problems(tmp_path: Path, mutate) -> str:
    """The problems of the clicks spec after `mutate`, each naming the file and giving a fix."""
    spec = copy.deepcopy(CLICKS)
    mutate(spec)
    path = write_spec(tmp_path, spec, name="clicks")
    with pytest.raises(SpecError) as caught:
        load_pipeline(path, lake_root=tmp_path / "lake")
    text = str(caught.value)
    assert str(path) in text and all("Fix:" in line for line in text.splitlines()), text
    return text


def assert_some_problem(text: str, field: str, message: str, fix: str) -> None:
    """One of the validator's lines for `field` says what is wrong and how to fix it (a field may have several)."""
    lines = [line for line in text.splitlines() if f": {field}: " in line]
    assert any(message in line and fix in line for line in lines), text


def joined(**changes):
    """Mutation: the clicks spec's join table with these fields changed (None removes a field)."""

    def mutate(spec):
        table = spec["tables"][JOINED]
        for key, value in changes.items():
            table.pop(key, None) if value is None else table.update({key: value})

    return mutate


def join_block(**changes):
    """Mutation: the join block with these fields changed (None removes a field)."""

    def mutate(spec):
        block = spec["tables"][JOINED]["join"]
        for key, value in changes.items():
            block.pop(key, None) if value is None else block.update({key: value})

    return mutate


def join_with_a_file_sink(spec):
    spec["tables"]["silver.clicks_files"] = {"from": "bronze.clicks", "sink": {"format": "parquet"}}
    spec["tables"][JOINED]["join"]["with"] = "silver.clicks_files"


def join_in_a_cycle(spec):
    spec["tables"]["silver.later"] = {"from": JOINED}
    spec["tables"][JOINED]["join"]["with"] = "silver.later"


SESSIONS_STATE = "open_sessions STRING"


def with_stateful(table_changes: dict | None = None, **stateful_changes):
    """Mutation: a gold.sessions table running the shipped sessions function (plus changes to it)."""

    def mutate(spec):
        stateful = {
            "function": "spark_jobs.transforms.sessions:sessions",
            "key": ["Device"],
            "output_schema": "Device STRING, session_start TIMESTAMP, session_end TIMESTAMP, events BIGINT",
            "state_schema": SESSIONS_STATE,
            "timeout": "event_time",
            "options": {"timestamp": "Recorded_At", "gap": "30 minutes"},
        }
        stateful.update(stateful_changes)
        table = {
            "from": "silver.activity",
            "watermark": {"column": "Recorded_At", "delay": "1 hour"},
            "stateful": stateful,
        }
        table.update(table_changes or {})
        spec["tables"]["gold.sessions"] = {k: v for k, v in table.items() if v is not None}

    return mutate


WHERE = "tables.gold.sessions"


@pytest.mark.parametrize(
    ("mutate", "field", "message", "fix"),
    [
        (
            kafka_source(bootstrap_servers="broker-1"),
            "sources.events.bootstrap_servers",
            "'broker-1' is neither host:port[,host:port...] nor ${ENV_VAR}",
            "Fix: write e.g. ${MILLPOND_KAFKA_BOOTSTRAP}",
        ),
        (
            kafka_source(bootstrap_servers="$KAFKA"),
            "sources.events.bootstrap_servers",
            "is neither host:port",
            "broker1:9092,broker2:9092",
        ),
        (
            lambda s: s["sources"]["events"].pop("bootstrap_servers"),
            "sources.events.bootstrap_servers",
            "required field is missing",
            "Fix: add 'bootstrap_servers:'",
        ),
        (
            kafka_source(subscribe="a,b"),
            "sources.events.subscribe",
            "is not a list of topic names",
            "Fix: write e.g. subscribe: [device_events] (several topics: a YAML list, not 'a,b')",
        ),
        (kafka_source(subscribe=[]), "sources.events.subscribe", "is not a list of topic names", "Fix: write e.g."),
        (
            lambda s: s["sources"]["events"].pop("schema"),
            "sources.events.schema",
            "a kafka source needs the schema of its JSON message values",
            "Fix: add 'schema:' with Spark DDL",
        ),
        (kafka_source(schema="device STRNG"), "sources.events.schema", "is not 'name TYPE'", "Fix: write Spark DDL"),
        (
            kafka_source(value_format="avro"),
            "sources.events.value_format",
            "unknown value format 'avro'",
            "Fix: use json",
        ),
        (
            kafka_source(starting_offsets="beginning"),
            "sources.events.starting_offsets",
            "'beginning' is not a starting position",
            "Fix: use earliest, latest, or {<topic>: {<partition>: <offset>}}",
        ),
        (
            kafka_source(starting_offsets={"other": {0: 1}}),
            "sources.events.starting_offsets.other",
            "not a subscribed topic",
            "subscribed: device_events",
        ),
        (
            kafka_source(starting_offsets={"device_events": {0: -3}}),
            "sources.events.starting_offsets.device_events",
            "is not {partition: offset}",
            "offset -2 = earliest, -1 = latest",
        ),
        (
            kafka_source(rate_limit={"max_offsets_per_trigger": 0}),
            "sources.events.rate_limit.max_offsets_per_trigger",
            "0 is not a whole number >= 1",
            "Fix: use a whole number >= 1",
        ),
        (
            kafka_source(rate_limit={"max_files_per_trigger": 10}),
            "sources.events.rate_limit.max_files_per_trigger",
            "unknown field 'max_files_per_trigger'",
            "did you mean 'max_offsets_per_trigger'?",
        ),
        (kafka_source(path="landing/events"), "sources.events.path", "unknown field 'path'", "allowed fields: format"),
        (
            kafka_source(options={"kafka.bootstrap.servers": "x:1"}),
            "sources.events.options.kafka.bootstrap.servers",
            "millpond sets this itself",
            "Fix: set bootstrap_servers instead",
        ),
        (
            kafka_source(options={"kafka.auto.offset.reset": "earliest"}),
            "sources.events.options.kafka.auto.offset.reset",
            "millpond sets this itself",
            "Fix: set starting_offsets instead",
        ),
        (
            kafka_source(options={"maxOffsetsPerTrigger": 5}),
            "sources.events.options.maxOffsetsPerTrigger",
            "not a Kafka client setting",
            "Fix: prefix Kafka client settings with 'kafka.'",
        ),
        (
            kafka_source(schema_drift="evolve"),
            "sources.events.schema_drift",
            "unknown policy 'evolve'",
            "Fix: use rescue",
        ),
        (
            lambda s: s["tables"]["gold.alerts"].update({"from": "kafka.events"}),
            "tables.gold.alerts.from",
            "only bronze tables read landing files or Kafka",
            "Fix: read the source in a bronze table",
        ),
        (
            lambda s: s["tables"]["bronze.events"].update(dedup={"keys": ["device"]}),
            "tables.bronze.events",
            "ingests them as they are",
            "Fix: deduplicate or aggregate in a downstream table",
        ),
        (
            lambda s: s["tables"]["bronze.events"].update({"from": "kafka.evnts"}),
            "tables.bronze.events.from",
            "unknown source or table 'kafka.evnts'",
            "Fix: read one of: kafka.events",
        ),
        (
            lambda s: s["tables"]["bronze.events"].update(
                sink={"format": "kafka", "topic": "t", "bootstrap_servers": "h:1"}
            ),
            "tables.bronze.events.sink",
            "a table reading a source splits each batch",
            "Fix: keep bronze.events on Delta and add a table with 'from: bronze.events' and this sink",
        ),
        (
            kafka_sink(topic="bad topic"),
            "tables.gold.alerts.sink.topic",
            "'bad topic' is not a topic name",
            "Fix: write e.g. topic: device_alerts",
        ),
        (
            lambda s: s["tables"]["gold.alerts"]["sink"].pop("topic"),
            "tables.gold.alerts.sink.topic",
            "required field is missing",
            "Fix: add 'topic:'",
        ),
        (
            kafka_sink(bootstrap_servers="localhost"),
            "tables.gold.alerts.sink.bootstrap_servers",
            "is neither host:port",
            "Fix: write e.g. ${MILLPOND_KAFKA_BOOTSTRAP}",
        ),
        (
            kafka_sink(value=""),
            "tables.gold.alerts.sink.value",
            "'' is not a Spark SQL expression",
            "Fix: write e.g. value: to_json(struct(*))",
        ),
        (
            kafka_sink(options={"kafka.value.serializer": "x"}),
            "tables.gold.alerts.sink.options.kafka.value.serializer",
            "millpond sets this itself",
            "Fix: remove it: set the sink's value expression",
        ),
        (kafka_sink(path="x"), "tables.gold.alerts.sink.path", "unknown field 'path'", "allowed fields: format, topic"),
        (
            lambda s: s["tables"]["gold.alerts"].update(
                output_mode="complete", aggregate={"group_by": ["device"], "measures": {"n": "count(*)"}}
            ),
            "tables.gold.alerts.output_mode",
            "complete mode would send the whole result again every batch",
            "Fix: use output_mode: update (each changed row is sent once per batch) or append",
        ),
        (
            lambda s: s["tables"]["gold.alerts"].update(expectations="devices.gold.alerts"),
            "tables.gold.alerts.expectations",
            "cannot gate a Kafka sink",
            "Fix: gate the Delta table this one reads",
        ),
        (
            lambda s: s["tables"].update({"gold.more": {"from": "gold.alerts"}}),
            "tables.gold.more.from",
            "gold.alerts sends its rows to Kafka topic device_alerts, and tables read their upstream as a Delta stream",
            "Fix: read bronze.events instead",
        ),
        (
            lambda s: s["tables"]["gold.alerts"].update(sink={"format": "parquet", "topic": "t"}),
            "tables.gold.alerts.sink.topic",
            "unknown field 'topic'",
            "allowed fields: format, options",
        ),
    ],
)
def test_kafka_rules_name_field_and_fix(tmp_path, mutate, field, message, fix):
    assert_problem(problems_for(tmp_path, mutate, base=KAFKA_SPEC), field, message, fix)


def test_a_run_needing_an_unset_kafka_address_is_refused_before_spark(tmp_path, monkeypatch, capsys):
    """`${NAME}` is read when a run starts (Airflow parses specs where it may be unset): unset, not host:port or no
    broker answering there, the run exits 2 naming the file, the field, the variable and the fix, and starts nothing."""
    path = write_spec(tmp_path, KAFKA_SPEC, "devices")
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    monkeypatch.delenv("MILLPOND_KAFKA_BOOTSTRAP", raising=False)
    assert load_pipeline(path, tmp_path / "lake").sources["kafka.events"].bootstrap_servers == (
        "${MILLPOND_KAFKA_BOOTSTRAP}"
    )
    assert runner.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert_problem(
        err,
        "sources.events.bootstrap_servers",
        "environment variable MILLPOND_KAFKA_BOOTSTRAP is not set",
        "Fix: export MILLPOND_KAFKA_BOOTSTRAP=host:port[,host:port] where the run starts",
    )
    assert_problem(err, "tables.gold.alerts.sink.bootstrap_servers", "MILLPOND_KAFKA_BOOTSTRAP is not set", "Fix:")
    assert str(path) in err
    monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", "localhost")
    assert runner.main([str(path), "--tables", "bronze.events"]) == 2
    assert_problem(
        capsys.readouterr().err,
        "sources.events.bootstrap_servers",
        "MILLPOND_KAFKA_BOOTSTRAP='localhost' is not host:port",
        "Fix: export MILLPOND_KAFKA_BOOTSTRAP=",
    )
    with socket.socket() as unused:  # a port nobody listens on: Spark's client would retry for minutes
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
        monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", address)
        assert runner.main([str(path), "--tables", "bronze.events"]) == 2
    assert_problem(
        capsys.readouterr().err,
        "sources.events.bootstrap_servers",
        f"no Kafka broker answers on {address} (from MILLPOND_KAFKA_BOOTSTRAP)",
        "Fix: start the broker (on this machine: make kafka-up)",
    )
    assert not (tmp_path / "lake" / "_system").exists()  # no lock, no event log: nothing started


@pytest.mark.parametrize(
    ("mutate", "field", "message", "fix"),
    [
        (
            join_block(type="full_outer"),
            f"tables.{JOINED}.join.type",
            "unknown join type 'full_outer'",
            "Fix: use one of inner, left_outer",
        ),
        (
            joined(watermark=None),
            f"tables.{JOINED}.watermark",
            "without a watermark on the 'from' side its rows stay forever",
            "Fix: add 'watermark: {column: <the from side's event time>",
        ),
        (
            join_block(watermark=None),
            f"tables.{JOINED}.join.watermark",
            "required field is missing",
            "Fix: add 'watermark:'",
        ),
        (
            join_block(time_range=None),
            f"tables.{JOINED}.join.time_range",
            "required field is missing",
            "Fix: add 'time_range:'",
        ),
        (
            joined(output_mode="update", keys=["impression_id"]),
            f"tables.{JOINED}.output_mode",
            "runs in append mode only, not update",
            f"Fix: use output_mode: append, and aggregate in a table with 'from: {JOINED}'",
        ),
        (
            joined(
                aggregate={"group_by": ["ad_id"], "measures": {"clicks": "count(click_id)"}}, output_mode="complete"
            ),
            f"tables.{JOINED}.aggregate",
            "a join table cannot also aggregate",
            f"Fix: do it in a table with 'from: {JOINED}'",
        ),
        (
            joined(dedup={"keys": ["impression_id", "impression_time"]}),
            f"tables.{JOINED}.dedup",
            "a join table cannot also dedup",
            f"Fix: do it in a table with 'from: {JOINED}'",
        ),
        (
            joined(
                stateful={
                    "function": "spark_jobs.transforms.sessions:sessions",
                    "key": ["ad_id"],
                    "output_schema": "ad_id STRING, session_start TIMESTAMP, session_end TIMESTAMP, events BIGINT",
                    "state_schema": "open_sessions STRING",
                    "options": {"timestamp": "impression_time", "gap": "30 minutes"},
                }
            ),
            f"tables.{JOINED}.stateful",
            "a join table cannot also run a stateful function",
            f"Fix: do it in a table with 'from: {JOINED}'",
        ),
        (
            joined(expectations=f"clicks.{JOINED}"),
            f"tables.{JOINED}.expectations",
            "a join table cannot be gated",
            f"Fix: gate a table with 'from: {JOINED}'",
        ),
        (
            join_block(**{"with": "landing.clicks"}),
            f"tables.{JOINED}.join.with",
            "landing.clicks is a landing source, and a join reads tables as Delta streams",
            "Fix: join the bronze table that ingests it (bronze.clicks: from: landing.clicks)",
        ),
        (
            join_block(**{"with": "silver.nope"}),
            f"tables.{JOINED}.join.with",
            "unknown table 'silver.nope'",
            "Fix: join one of: bronze.clicks, bronze.impressions",
        ),  # (write_spec sorts the tables)
        (
            join_block(**{"with": JOINED}),
            f"tables.{JOINED}.join.with",
            "a table cannot join itself",
            "Fix: join an upstream table",
        ),
        (
            join_with_a_file_sink,
            f"tables.{JOINED}.join.with",
            "silver.clicks_files writes parquet files",
            "Fix: join bronze.clicks instead",
        ),
        (
            join_in_a_cycle,
            f"tables.{JOINED}.from",
            f"tables form a cycle: {JOINED} -> silver.later -> {JOINED}",
            "Fix: make one table read upstream",
        ),
        (
            join_block(using=[]),
            f"tables.{JOINED}.join.using",
            "a join needs at least one key column",
            "Fix: write e.g. using: [impression_id]",
        ),
        (
            join_block(time_range={"min": "1 hour", "max": "0 seconds"}),
            f"tables.{JOINED}.join.time_range",
            "min '1 hour' is after max '0 seconds': no row could ever match",
            "Fix: give min <= max",
        ),
        (
            join_block(time_range={"min": "0 seconds", "max": "an hour"}),
            f"tables.{JOINED}.join.time_range.max",
            "'an hour' is not a duration",
            "Fix: write e.g. '0 seconds', '1 hour' or '-10 minutes'",
        ),
        (
            join_block(kind="inner"),
            f"tables.{JOINED}.join.kind",
            "unknown field 'kind'",
            "allowed fields: with, using, type, watermark, time_range",
        ),
    ],
)
def test_join_rules_name_field_and_fix(tmp_path, mutate, field, message, fix):
    assert_some_problem(join_problems(tmp_path, mutate), field, message, fix)


def test_a_bare_on_key_is_caught_with_the_yaml_reason(tmp_path):
    """`on:` is what people write for join keys, and YAML 1.1 loads it as the boolean true."""
    path = tmp_path / "clicks.yaml"
    path.write_text(CLICKS_TEXT.replace("      using: [impression_id]", "      on: [impression_id]"))
    with pytest.raises(SpecError) as caught:
        load_pipeline(path, lake_root=tmp_path / "lake")
    assert_some_problem(
        str(caught.value),
        f"tables.{JOINED}.join.on",
        "YAML reads the key 'on' as true",
        "Fix: write the keys as using: [column, ...]",
    )


def test_join_tables_load_after_both_upstreams_and_full_refresh_follows_either_side(tmp_path):
    spec = copy.deepcopy(CLICKS)
    # declared before the tables it reads, an inner join whose `with` rows may come before the `from` row
    tables = {
        "silver.early_clicks": {
            "from": "bronze.clicks",
            "watermark": {"column": "click_time", "delay": "1 hour"},
            "join": {
                "with": "bronze.impressions",
                "using": ["impression_id"],
                "watermark": {"column": "impression_time", "delay": "1 hour"},
                "time_range": {"min": "-1 hour", "max": "0 seconds"},
            },
        }
    }
    spec["tables"] = {**tables, **spec["tables"]}
    pipeline = load_pipeline(write_spec(tmp_path, spec, name="clicks"), lake_root=tmp_path / "lake")
    order = list(pipeline.tables)
    for table_id in ("silver.early_clicks", JOINED):
        join = pipeline.tables[table_id].join
        assert order.index(table_id) > max(order.index(u) for u in pipeline.tables[table_id].upstreams)
        assert pipeline.tables[table_id].is_stateful and join is not None
    early = pipeline.tables["silver.early_clicks"].join
    assert (early.type, early.using, early.time_range) == ("inner", ("impression_id",), ("-1 hour", "0 seconds"))
    assert pipeline.tables[JOINED].join.type == "left_outer"
    for side in ("bronze.clicks", "bronze.impressions"):
        rebuilt = pipeline.downstream([side])
        assert set(rebuilt) == {side, "silver.early_clicks", JOINED, "gold.ad_clicks", "gold.campaign_ctr"}
        assert rebuilt.index(JOINED) < rebuilt.index("gold.ad_clicks")


@pytest.mark.parametrize(
    ("mutate", "field", "message", "fix"),
    [
        (
            with_stateful(function="spark_jobs.transforms.sessions.sessions"),
            f"{WHERE}.stateful.function",
            "is not 'module:function'",
            "Fix: e.g. spark_jobs.transforms.sessions:sessions",
        ),
        (
            with_stateful(function="spark_jobs.transforms.visits:sessions"),
            f"{WHERE}.stateful.function",
            "module 'spark_jobs.transforms.visits' not found",
            "Fix: put transforms in spark_jobs/transforms/",
        ),
        (
            with_stateful(function="spark_jobs.transforms.sessions:sesions"),
            f"{WHERE}.stateful.function",
            "'sesions' is not defined in module 'spark_jobs.transforms.sessions'",
            "Fix: define 'def sesions(key, rows, state, ...)' there, or fix the name",
        ),
        (
            with_stateful(function="spark_jobs.transforms.sessions:STATE_SCHEMA"),
            f"{WHERE}.stateful.function",
            "spark_jobs.transforms.sessions.STATE_SCHEMA is not callable",
            "Fix: point 'function' at a def taking (key, rows, state, **options)",
        ),
        (
            with_stateful(function="spark_jobs.transforms.sessions:gap_ms"),
            f"{WHERE}.stateful.function",
            "gap_ms(gap) does not take (key, rows, state)",
            "Fix: define it as 'def gap_ms(key, rows, state, ...)'",
        ),
        (
            with_stateful(options={"timestamp": "Recorded_At", "gap": "30 minutes", "gapp": 1}),
            f"{WHERE}.stateful.options.gapp",
            "sessions takes no parameter 'gapp'",
            "Fix: use its parameters: timestamp, gap",
        ),
        (
            with_stateful(options={"timestamp": "Recorded_At"}),
            f"{WHERE}.stateful.options",
            "sessions needs the option 'gap'",
            "Fix: add it: options: {gap: ...}",
        ),
        (
            with_stateful({"output_mode": "complete"}),
            f"{WHERE}.output_mode",
            "a stateful function emits its rows itself",
            "Fix: use output_mode: append (each row written once) or update",
        ),
        (
            with_stateful({"watermark": None}),
            f"{WHERE}.stateful.timeout",
            "an event_time timeout fires once the watermark passes the time the function set, and this table has no "
            "watermark",
            "Fix: add 'watermark: {column: <event time>, delay: ...}', or use timeout: none",
        ),
        (
            with_stateful(timeout="processing_time"),
            f"{WHERE}.stateful.timeout",
            "unknown timeout 'processing_time'",
            "Fix: use event_time",
        ),
        (
            with_stateful({"aggregate": {"group_by": ["Device"], "measures": {"n": "count(*)"}}}),
            f"{WHERE}.stateful",
            "a stateful function cannot share a table with aggregate",
            "Fix: move the aggregate to the table this one reads (or to one that reads it)",
        ),
        (
            with_stateful({"dedup": {"keys": ["Device", "Index"]}}),
            f"{WHERE}.stateful",
            "a stateful function cannot share a table with dedup",
            "Fix: move the dedup to the table this one reads",
        ),
        (
            with_stateful(output_schema="Device STRNG, events BIGINT"),
            f"{WHERE}.stateful.output_schema",
            "'Device STRNG' is not 'name TYPE'",
            "Fix: write Spark DDL",
        ),
        (
            with_stateful(state_schema="open_sessions STRING, ends"),
            f"{WHERE}.stateful.state_schema",
            "'ends' is not 'name TYPE'",
            "Fix: write Spark DDL",
        ),
        (
            with_stateful(state_schema="starts ARRAY<BIGINT>, n BIGINT"),
            f"{WHERE}.stateful.state_schema",
            "'starts ARRAY<BIGINT>': PySpark 4.2's Python worker cannot read an ARRAY column of a state schema",
            "Fix: keep the list in a STRING column (e.g. JSON)",
        ),
        (with_stateful(key=[]), f"{WHERE}.stateful.key", "no key column is given", "Fix: e.g. key: [Device]"),
        (with_stateful(key=None), f"{WHERE}.stateful.key", "no key column is given", "Fix: e.g. key: [Device]"),
        (
            with_stateful({"output_mode": "update"}),
            f"{WHERE}.keys",
            "update mode MERGEs each batch into the table on its keys, and none are given",
            "Fix: add keys: [...] naming output_schema columns (Device, session_start, session_end, events)",
        ),
        (
            with_stateful({"output_mode": "update", "keys": ["Device", "hour"]}),
            f"{WHERE}.keys",
            "hour not in the stateful function's output_schema",
            "Fix: use columns of output_schema: Device,",
        ),
        (
            with_stateful({"output_mode": "update", "keys": ["Device"], "expectations": "activity.gold.sessions"}),
            f"{WHERE}.expectations",
            "a gate cannot set rows of an update-mode table aside",
            "Fix: gate the upstream table, or use output_mode: append",
        ),
        (with_stateful(timeot="none"), f"{WHERE}.stateful.timeot", "unknown field 'timeot'", "did you mean 'timeout'?"),
    ],
)
def test_stateful_rules_name_field_and_fix(tmp_path, mutate, field, message, fix):
    assert_problem(problems_for(tmp_path, mutate), field, message, fix)


def test_a_stateful_function_is_checked_inside_a_zip_as_spark_submit_ships_it(tmp_path, monkeypatch):
    """Under Airflow the job imports transforms from spark-submit's --py-files zip: validation must read them there
    (it once failed every stateful spec with 'Not a directory')."""
    archive = tmp_path / "src.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("zipped_transforms/__init__.py", "")
        zipped.writestr(
            "zipped_transforms/status.py",
            "LIMIT = 3\n\ndef latest(key, rows, state, fields=()):\n    yield from rows\n",
        )
    monkeypatch.syspath_prepend(str(archive))
    assert function_problems("zipped_transforms.status:latest", ["fields"]) == []
    assert function_problems("zipped_transforms.status:LIMIT", []) == [
        (
            "function",
            "zipped_transforms.status.LIMIT is not callable (a constant value)",
            "point 'function' at a def taking (key, rows, state, **options)",
        )
    ]
    [(field, message, _)] = function_problems("zipped_transforms.status:latest", ["gap"])
    assert field == "options.gap" and "latest takes no parameter 'gap'" in message


def test_a_stateful_table_loads_and_counts_as_stateful(tmp_path):
    spec = copy.deepcopy(ACTIVITY)
    with_stateful(
        {"output_mode": "update", "keys": ["Device"]},
        timeout="none",
        function="spark_jobs.transforms.sessions:latest_session",
    )(spec)
    spec["tables"]["gold.latest"] = spec["tables"].pop("gold.sessions")
    with_stateful()(spec)
    pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
    sessions, latest = pipeline.tables["gold.sessions"], pipeline.tables["gold.latest"]
    assert sessions.stateful.key == ("Device",) and sessions.stateful.options["gap"] == "30 minutes"
    assert sessions.is_stateful and not sessions.merges and sessions.query_output_mode == "append"
    assert sessions.stateful.output_columns == ("Device", "session_start", "session_end", "events")
    assert latest.merges and latest.query_output_mode == "update" and latest.stateful.timeout == "none"


# ---------------------------------------------------------------------------------------------- lookups

CTR = "gold.campaign_ctr"


def lookup_block(**changes):
    """Mutation: gold.campaign_ctr's lookup block with these fields changed (None removes a field)."""

    def mutate(spec):
        block = spec["tables"][CTR]["lookup"]
        for key, value in changes.items():
            block.pop(key, None) if value is None else block.update({key: value})

    return mutate


def campaigns_source(**changes):
    """Mutation: the campaigns dimension source with these fields changed (None removes a field)."""

    def mutate(spec):
        source = spec["sources"]["campaigns"]
        for key, value in changes.items():
            source.pop(key, None) if value is None else source.update({key: value})

    return mutate


def reading_the_dimension_as_a_stream(spec):
    spec["tables"]["bronze.campaigns"] = {"from": "landing.campaigns"}


def a_lookup_in_bronze(spec):
    spec["tables"]["bronze.impressions"]["lookup"] = {"with": "landing.campaigns", "using": ["ad_id"]}


@pytest.mark.parametrize(
    ("mutate", "field", "message", "fix"),
    [
        (
            lookup_block(**{"with": "landing.nope"}),
            f"tables.{CTR}.lookup.with",
            "unknown dimension 'landing.nope'",
            "Fix: look up one of: landing.campaigns",
        ),
        (
            lookup_block(**{"with": "landing.clicks"}),
            f"tables.{CTR}.lookup.with",
            "landing.clicks is a streaming source",
            "Fix: mark sources.clicks 'static: true' if it is a dimension, or read it in a bronze table and "
            "join that with 'join:'",
        ),
        (
            lookup_block(**{"with": JOINED}),
            f"tables.{CTR}.lookup.with",
            f"{JOINED} is a table, and a lookup reads a static source",
            "Fix: join a table's stream with 'join:'",
        ),
        (
            lookup_block(watermark={"column": "impression_time", "delay": "1 hour"}),
            f"tables.{CTR}.lookup.watermark",
            "a lookup (stream-static join) keeps no state",
            "Fix: remove 'watermark:'",
        ),
        (
            lookup_block(time_range={"min": "0 seconds", "max": "1 hour"}),
            f"tables.{CTR}.lookup.time_range",
            "a time_range has nothing to bound",
            "Fix: remove 'time_range:'",
        ),
        (
            lookup_block(type="full_outer"),
            f"tables.{CTR}.lookup.type",
            "Spark does not run a full_outer stream-static join with the stream on the left",
            "Fix: use inner or left_outer",
        ),
        (
            lookup_block(type="right_outer"),
            f"tables.{CTR}.lookup.type",
            "Spark does not run a right_outer stream-static join with the stream on the left",
            "Fix: use inner or left_outer",
        ),
        (
            lookup_block(type="left_semi"),
            f"tables.{CTR}.lookup.type",
            "unknown lookup type 'left_semi'",
            "Fix: use one of inner, left_outer",
        ),
        (
            lookup_block(using=["campaign_id"]),
            f"tables.{CTR}.lookup.using",
            "campaign_id not in landing.campaigns's schema",
            "Fix: use columns of sources.campaigns.schema: ad_id, campaign, advertiser",
        ),
        (
            lookup_block(using=[]),
            f"tables.{CTR}.lookup.using",
            "a lookup needs at least one key column",
            "Fix: write e.g. using: [ad_id]",
        ),
        (lookup_block(**{"with": None}), f"tables.{CTR}.lookup.with", "required field is missing", "Fix: add 'with:'"),
        (
            reading_the_dimension_as_a_stream,
            "tables.bronze.campaigns.from",
            "landing.campaigns is a static source (a dimension, read whole each run), not a stream",
            "Fix: read a streaming source, and look landing.campaigns up with 'lookup: {with: landing.campaigns",
        ),
        (
            a_lookup_in_bronze,
            "tables.bronze.impressions.lookup",
            "a table reading landing files or Kafka ingests them as they are",
            "Fix: look the dimension up in a table with 'from: bronze.impressions'",
        ),
        (
            campaigns_source(rate_limit={"max_files_per_trigger": 1}),
            "sources.campaigns.rate_limit",
            "a static source is read whole each run, so rate_limit does not apply",
            "Fix: remove it",
        ),
        (
            campaigns_source(format="avro"),
            "sources.campaigns.format",
            "unknown format 'avro'",
            f"Fix: use one of {', '.join(STATIC_FORMATS)}",  # every format a dimension may have
        ),
        (
            campaigns_source(static=None, format="delta"),
            "sources.campaigns.schema",
            "without 'static: true' a delta source is another job's table, streamed as its change data feed",
            "Fix: remove it, or add 'static: true' to read the table whole as a dimension",
        ),
        (
            campaigns_source(schema=None),
            "sources.campaigns.schema",
            "a file source needs a schema",
            "Fix: add 'schema:'",
        ),
    ],
)
def test_lookup_rules_name_field_and_fix(tmp_path, mutate, field, message, fix):
    assert_some_problem(join_problems(tmp_path, mutate), field, message, fix)


def test_a_lookup_loads_as_a_dimension_that_is_no_upstream(tmp_path):
    """The dimension is not a table to order or rebuild, nor a streaming input; a Delta dimension needs no schema."""
    spec = copy.deepcopy(CLICKS)
    spec["sources"]["campaigns"] = {"static": True, "format": "delta", "path": "dimensions/campaigns"}
    pipeline = load_pipeline(write_spec(tmp_path, spec, name="clicks"), lake_root=tmp_path / "lake")
    table = pipeline.tables[CTR]
    assert (table.lookup.dimension, table.lookup.using, table.lookup.type) == (
        "landing.campaigns",
        ("ad_id",),
        "left_outer",
    )
    assert table.upstreams == (JOINED,)
    source = pipeline.sources["landing.campaigns"]
    assert source.static and source.format == "delta" and source.schema == ""
    assert not load_pipeline("clicks").sources["landing.impressions"].static


@pytest.mark.parametrize("tags", [0, "nightly", {"a": 1}, [["nested"]]])
def test_tags_that_are_not_a_list_of_words_name_the_field_and_fix(tmp_path, tags):
    text = problems_for(tmp_path, lambda s: s.update(tags=tags))
    assert_problem(text, "tags", "expected a list of tags", "write e.g. tags: [sales, hourly]")


def test_tags_load_as_words(tmp_path):
    spec = {**copy.deepcopy(ACTIVITY), "tags": ["sales", 2026]}
    assert load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake").tags == ("sales", "2026")


def test_column_descriptions_load_as_one_line_each_and_bad_ones_name_the_field(tmp_path):
    """`columns:` (a column's comment in its table): whitespace of a folded YAML text becomes one line; a value
    that is no text, an empty mapping, a column described twice, a sink without a Delta schema and a bronze column
    its source does not give are rejected before Spark starts."""
    spec = copy.deepcopy(ACTIVITY)
    spec["tables"]["silver.activity"]["columns"] = {"Device": "The device\n  that recorded.", "x": "In ${units}."}
    pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
    assert pipeline.tables["silver.activity"].column_comments == (
        ("Device", "The device that recorded."),
        ("x", "In ${units}."),
    )

    def describe(table: str, columns: object):
        return lambda s: s["tables"][table].update(columns=columns)

    text = problems_for(tmp_path, describe("silver.activity", {"Device": 3}))
    assert_problem(text, "tables.silver.activity.columns.Device", "3 is not a description", "a line of text")
    text = problems_for(tmp_path, describe("silver.activity", ["Device"]))
    assert_problem(text, "tables.silver.activity.columns", "is not a mapping", "{Device: The phone}")
    text = problems_for(tmp_path, describe("silver.activity", {}))
    assert_problem(text, "tables.silver.activity.columns", "describes no column", "drop `columns:`")
    text = problems_for(tmp_path, describe("silver.activity", {"Device": "a", "device": "b"}))
    assert_problem(text, "tables.silver.activity.columns", "'device' is described twice", "keep one entry")
    text = problems_for(tmp_path, describe("bronze.activity", {"Devise": "The device.", "_source_file": "Its file."}))
    assert_problem(text, "tables.bronze.activity.columns.Devise", "has no column 'Devise'", "did you mean 'Device'?")
    assert "has no column '_source_file'" not in text  # a column bronze adds beside the schema is known
    parquet = lambda s: s["tables"]["gold.device_counts"].update(sink={"format": "parquet"})  # noqa: E731
    text = problems_for(tmp_path, parquet)
    assert_problem(text, "tables.gold.device_counts.columns", "a parquet sink has no table schema", "Delta table")


@pytest.mark.parametrize(
    ("source", "described", "refused"),
    [
        ({"format": "csv", "options": {"header": "true"}}, ["_source_file", "_rescued_data"], ["_rescued_data"]),
        ({"schema_drift": "add"}, ["a_field_that_may_come"], []),  # known only once it arrives: checked at run time
        ({}, ["_rescued_data", "_ingested_at", "Recorded_At"], []),
    ],
)
def test_a_landing_bronzes_described_columns_are_its_sources_and_what_bronze_adds(tmp_path, source, described, refused):
    spec = copy.deepcopy(ACTIVITY)
    spec["sources"]["activity"].update(source)
    spec["tables"]["bronze.activity"]["columns"] = {name: "described" for name in described}
    if not refused:
        load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
        return
    text = problems_for(tmp_path, lambda s: s.update(spec))
    for name in refused:
        assert_problem(text, f"tables.bronze.activity.columns.{name}", f"has no column {name!r}", "describe one")


def test_a_kafka_bronzes_described_columns_include_where_each_message_came_from(tmp_path):
    spec = copy.deepcopy(KAFKA_SPEC)
    spec["tables"]["bronze.events"]["columns"] = {"_kafka_offset": "The message's offset.", "device": "The device."}
    load_pipeline(write_spec(tmp_path, spec, name="devices"), lake_root=tmp_path / "lake")
    missing = lambda s: s["tables"]["bronze.events"].update(columns={"_source_file": "A file."})  # noqa: E731
    text = problems_for(tmp_path, missing, base=KAFKA_SPEC)
    assert_problem(text, "tables.bronze.events.columns._source_file", "has no column '_source_file'", "describe one")
