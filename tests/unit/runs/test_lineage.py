"""OpenLineage events of a run (millpond.runs.lineage) on the activity spec over real Delta tables written by delta-rs:
what openlineage-python's own file transport writes (names, parentage, row counts, schema, column lineage), what
`_system/lineage` keeps, and a dead receiver that neither fails nor stalls the run. Real runs on both backends, from the
CLI and from Airflow, are in tests/integration/pipelines/test_runner.py (the spine) and
tests/integration/airflow/test_dag_runs.py (the end-to-end DAG run)."""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from millpond.lake import delta_log, paths
from millpond.runs import lineage
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import load_pipeline
from tests.support import REPO
from tests.support.lineage import assert_parses

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 28, 12, tzinfo=UTC)
SILVER_ROWS = {
    "Recorded_At": pa.array([T0, T0], pa.timestamp("us", tz="UTC")),
    "Device": ["a", "b"],
    "Index": [1, 2],
    "Model": ["m", "m"],
    "User": ["u", "u"],
    "gt": ["walk", "sit"],
    "x": [1.0, 2.0],
    "y": [1.0, 2.0],
    "z": [1.0, 2.0],
}
GOLD = {
    "gold.device_counts": {"Device": ["a", "b"], "total_recordings": [1, 1]},
    "gold.activity_hourly": {
        "hour": pa.array([T0, T0], pa.timestamp("us", tz="UTC")),
        "gt": ["walk", "sit"],
        "recordings": [1, 1],
        "avg_x": [1.0, 2.0],
        "avg_y": [1.0, 2.0],
        "avg_z": [1.0, 2.0],
    },
}


def write(table_id: str, columns: dict) -> None:
    write_deltalake(str(paths.table_path(table_id)), pa.table(columns), mode="append")


def results() -> list[TableResult]:
    return [
        TableResult(
            t,
            t.split(".")[0],
            T0 + timedelta(seconds=i),
            T0 + timedelta(seconds=i + 1),
            version_after=0,
            rows_written=2,
        )
        for i, t in enumerate(["bronze.activity", "silver.activity", *GOLD])
    ]


@pytest.fixture
def activity_lake(lake):
    write("bronze.activity", {**SILVER_ROWS, "_source_file": ["f1", "f2"]})
    write("silver.activity", SILVER_ROWS)
    for table_id, columns in GOLD.items():
        write(table_id, columns)
    return lake


def events_in(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_sends_start_and_complete_per_table_with_the_specs_edges_rows_and_columns(
    activity_lake, tmp_path, monkeypatch
):
    sent = tmp_path / "events.jsonl"
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(sent))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
    ran = results()
    # silver's gate: one expectation failed in a batch (its `drop` rows went to the quarantine), the others held.
    ran[1].gate = {"failed_expectations": [], "warnings": [{"expectation": "expect_column_values_to_be_between(x)"}]}
    lineage.record(load_pipeline("activity"), RunContext("run-1"), ran)

    events = events_in(sent)
    assert_parses(events)
    # The millpond run first and last (the tables' parent), each table's START then COMPLETE between.
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("activity", "START"),
        *[
            (f"activity.{t}", kind)
            for t in ("bronze.activity", "silver.activity", *GOLD)
            for kind in ("START", "COMPLETE")
        ],
        ("activity", "COMPLETE"),
    ]
    parent_run = events[0]["run"]["runId"]
    assert all(e["run"]["facets"]["parent"]["run"]["runId"] == parent_run for e in events[1:-1])

    lake = activity_lake.resolve()
    complete = {e["job"]["name"].removeprefix("activity."): e for e in events[1:-1] if e["eventType"] == "COMPLETE"}
    edges = {t: ([i["name"] for i in e["inputs"]], [o["name"] for o in e["outputs"]]) for t, e in complete.items()}
    assert edges == {
        "bronze.activity": ([str(lake / "landing" / "activity")], [str(lake / "bronze" / "activity")]),
        "silver.activity": ([str(lake / "bronze" / "activity")], [str(lake / "silver" / "activity")]),
        "gold.device_counts": ([str(lake / "silver" / "activity")], [str(lake / "gold" / "device_counts")]),
        "gold.activity_hourly": ([str(lake / "silver" / "activity")], [str(lake / "gold" / "activity_hourly")]),
    }
    for table_id, event in complete.items():
        (out,) = event["outputs"]
        assert out["namespace"] == "file"
        # The table's name within its lake: another lake's `gold.device_counts` is another table.
        assert out["facets"]["symlinks"]["identifiers"] == [
            {"namespace": f"file://{lake}", "name": table_id, "type": "TABLE"}
        ]
        assert out["outputFacets"]["outputStatistics"]["rowCount"] == 2  # what the run committed
        assert [f["name"] for f in out["facets"]["schema"]["fields"]] == list(
            DeltaTable(str(paths.table_path(table_id))).schema().to_arrow().names
        )

    def lineage_of(table_id: str) -> dict[str, set[tuple[str, str, str]]]:
        fields = complete[table_id]["outputs"][0]["facets"]["columnLineage"]["fields"]
        return {
            column: {
                (i["field"], i["transformations"][0]["type"], i["transformations"][0]["subtype"])
                for i in f["inputFields"]
            }
            for column, f in fields.items()
        }

    assertions = complete["silver.activity"]["outputs"][0]["facets"]["dataQualityAssertions"]["assertions"]
    suite = json.loads((REPO / "expectations" / "activity.silver.activity.json").read_text())["expectations"]
    assert len(assertions) == len(suite)
    assert [a["name"] for a in assertions if not a["success"]] == ["expect_column_values_to_be_between(x)"]
    assert {"assertion": "expect_column_values_to_not_be_null", "column": "Device", "severity": "fail"}.items() <= (
        assertions[0].items()
    )
    assert "dataQualityAssertions" not in complete["gold.device_counts"]["outputs"][0]["facets"]  # not gated here

    silver = str(lake / "silver" / "activity")
    assert {
        i["name"]
        for f in complete["gold.activity_hourly"]["outputs"][0]["facets"]["columnLineage"]["fields"].values()
        for i in f["inputFields"]
    } == {silver}
    assert lineage_of("gold.device_counts") == {
        "Device": {("Device", "DIRECT", "IDENTITY")},
        "total_recordings": {("Device", "INDIRECT", "GROUP_BY")},  # count(*): only its group says which rows
    }
    hourly = lineage_of("gold.activity_hourly")
    assert set(hourly) == set(GOLD["gold.activity_hourly"])  # every output column
    assert hourly["hour"] == {("Recorded_At", "DIRECT", "TRANSFORMATION")}
    assert hourly["gt"] == {("gt", "DIRECT", "IDENTITY")}
    assert hourly["avg_x"] == {("x", "DIRECT", "AGGREGATION")}
    assert hourly["recordings"] == {("Recorded_At", "INDIRECT", "GROUP_BY"), ("gt", "INDIRECT", "GROUP_BY")}

    # Kept in the lake too, the same events one row each.
    kept = DeltaTable(str(paths.system_path("lineage"))).to_pyarrow_table().to_pylist()
    assert sorted((r["job_name"], r["event_type"]) for r in kept) == sorted(
        (e["job"]["name"], e["eventType"]) for e in events
    )
    assert {r["run_id"] for r in kept} == {"run-1"}
    assert all(json.loads(r["event"])["run"]["runId"] == r["run_uuid"] for r in kept)


def test_an_airflow_parent_is_used_as_given_and_a_failed_table_ends_in_fail(activity_lake, tmp_path, monkeypatch):
    sent = tmp_path / "events.jsonl"
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(sent))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
    task = "01933f7e-0000-7000-8000-000000000001"
    dag_run = "01933f7e-0000-7000-8000-000000000002"
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"default/activity.ingest/{task}")
    monkeypatch.setenv("OPENLINEAGE_ROOT_PARENT_ID", f"default/activity/{dag_run}")
    ran = results()[:2]
    ran[1].outcome, ran[1].error = "failed", "boom"
    lineage.record(load_pipeline("activity"), RunContext("run-2"), ran)

    events = events_in(sent)
    assert_parses(events)
    assert [e["job"]["name"] for e in events] == ["activity.bronze.activity"] * 2 + ["activity.silver.activity"] * 2
    assert events[-1]["eventType"] == "FAIL" and events[-1]["run"]["facets"]["errorMessage"]["message"] == "boom"
    for event in events:
        parent = event["run"]["facets"]["parent"]
        assert (parent["job"]["namespace"], parent["job"]["name"], parent["run"]["runId"]) == (
            "default",
            "activity.ingest",
            task,
        )
        assert (parent["root"]["job"]["name"], parent["root"]["run"]["runId"]) == ("activity", dag_run)


def test_openlineage_disabled_sends_nothing_and_the_lake_still_keeps_the_events(activity_lake, tmp_path, monkeypatch):
    sent = tmp_path / "events.jsonl"
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(sent))
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    lineage.record(load_pipeline("activity"), RunContext("run-3"), results())
    assert not sent.exists()
    kept = DeltaTable(str(paths.system_path("lineage"))).to_pyarrow_table().to_pylist()
    assert {r["run_id"] for r in kept} == {"run-3"} and len(kept) == 10  # the run's and 4 tables' START and end


def test_a_dead_or_silent_receiver_neither_fails_nor_stalls_the_run_and_the_lake_keeps_the_events(
    activity_lake, monkeypatch, capsys
):
    monkeypatch.setenv("MILLPOND_LINEAGE_TIMEOUT_SECONDS", "0.5")
    with socket.socket() as refused:  # nobody listens: refused at once
        refused.bind(("127.0.0.1", 0))
        port = refused.getsockname()[1]
    monkeypatch.setenv("OPENLINEAGE_URL", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    lineage.record(load_pipeline("activity"), RunContext("run-3"), results())
    assert time.monotonic() - started < 5
    assert "lineage events not sent" in capsys.readouterr().err

    with socket.socket() as silent:  # accepts, never answers: the run waits its timeout, no longer
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("OPENLINEAGE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        lineage.record(load_pipeline("activity"), RunContext("run-4"), results())
        assert time.monotonic() - started < 3
    assert "lineage events not sent within 0.5 s" in capsys.readouterr().err
    kept = DeltaTable(str(paths.system_path("lineage"))).to_pyarrow_table().to_pylist()
    assert sorted({r["run_id"] for r in kept}) == ["run-3", "run-4"] and len(kept) == 20


def test_dataset_names_follow_openlineages_naming_on_disk_and_on_the_object_store(tmp_path):
    from millpond.lake import storage
    from millpond.lake.object_store import S3Path

    assert storage.lineage_name(S3Path("s3a://lakes/prod/gold/device_counts")) == (
        "s3://lakes",
        "prod/gold/device_counts",
    )
    assert storage.lineage_name(tmp_path / "gold" / ".." / "gold" / "t") == ("file", str(tmp_path / "gold" / "t"))


def test_columns_a_step_cannot_read_come_from_every_input_and_struct_fields_from_their_column():
    from millpond.runs.lineage_columns import Known, sql_columns

    bronze = ("file", "/lake/bronze/t")
    known = Known({c: [(bronze, c, "DIRECT", "IDENTITY")] for c in ("payload", "x", "device")})
    everything = {(bronze, c, "INDIRECT", "TRANSFORMATION") for c in ("payload", "x", "device")}

    read = sql_columns("SELECT payload.device AS d, x + 1 AS y, `s`.*FROM source", known)
    assert read.columns["d"] == [(bronze, "payload", "DIRECT", "TRANSFORMATION")]  # the struct column, not a table
    assert read.columns["y"] == [(bronze, "x", "DIRECT", "TRANSFORMATION")]
    assert read.columns["device"] == known.columns["device"]  # `s`.* keeps every column as it was
    # What the parser cannot read is never claimed as nothing: every input, INDIRECT.
    assert set(sql_columns("SELEC garbage FROM", known).of("anything")) == everything
    unknown = sql_columns("SELECT x RLIKE '^a' AS r FROM source", known).of("r")
    assert unknown and set(unknown) <= everything | {(bronze, "x", "DIRECT", "TRANSFORMATION")}


def test_a_table_s_schema_facet_columns_are_delta_rs_s_from_the_log_a_checkpoint_or_delta_rs_itself(tmp_path):
    """The schema facet reads the log's newest metadata without opening the table: the same names, types (nested
    ones by kind) and comments delta-rs gives, after a checkpoint too, and delta-rs's own where the log keeps the
    schema in a form that reader does not read."""
    path = tmp_path / "t"
    assert lineage.delta_columns(path) == []  # no table yet
    data = pa.table({"n": [1], "tags": [["x"]], "place": [{"city": "Oslo"}]})
    write_deltalake(str(path), data)
    DeltaTable(str(path)).alter.set_column_metadata("n", {"comment": "How many."})

    def by_delta_rs() -> list[lineage.Column]:
        fields = json.loads(DeltaTable(str(path)).schema().to_json())["fields"]
        kinds = [f["type"] if isinstance(f["type"], str) else f["type"]["type"] for f in fields]
        return [
            lineage.Column(f["name"], k, (f["metadata"] or {}).get("comment"))
            for f, k in zip(fields, kinds, strict=True)
        ]

    expected = [
        lineage.Column("n", "long", "How many."),
        lineage.Column("tags", "array", None),
        lineage.Column("place", "struct", None),
    ]
    assert lineage.delta_columns(path) == by_delta_rs() == expected
    for _ in range(2):
        write_deltalake(str(path), data, mode="append")
    DeltaTable(str(path)).create_checkpoint()
    assert lineage.delta_columns(path) == expected
    # A log the light reader cannot follow (no `_last_checkpoint`, the commits before the checkpoint cleaned up):
    # delta-rs finds the checkpoint by listing.
    (path / "_delta_log" / "_last_checkpoint").unlink()
    for commit in sorted((path / "_delta_log").glob("*.json"))[:3]:
        commit.unlink()
    assert delta_log.newest_metadata(path) is None
    assert lineage.delta_columns(path) == expected
