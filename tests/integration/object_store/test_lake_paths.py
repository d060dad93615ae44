"""The lake's own modules (no JVM) on an `s3a://` lake against a real S3 server: the same calls a local lake
takes, reaching the bucket through S3Path (millpond.lake.object_store) and delta-rs's storage options."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from millpond.lake import delta_log, paths, pending_reprocess, storage, system_tables
from millpond.lake.checkpoints import log_files
from millpond.lake.object_store import ObjectStoreError, S3Path, read_modify_write
from millpond.runs import reports, run_summary

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_lake(s3_bucket, monkeypatch):
    monkeypatch.setenv("MILLPOND_LAKE", f"s3a://{s3_bucket.name}/lake")
    return s3_bucket


def test_paths_read_write_and_list_in_the_bucket(s3_lake):
    root = paths.lake_root()
    assert isinstance(root, S3Path) and str(root) == f"s3a://{s3_lake.name}/lake"
    offsets = paths.checkpoint_path("activity", "bronze.activity") / "offsets"
    assert log_files(offsets) == [] and not offsets.is_dir() and not offsets.exists()
    for batch in (0, 1, 10, 2):
        storage.write_whole(offsets / str(batch), f'v1\n{{}}\n{{"batch": {batch}}}\n')
    (offsets / ".2.crc").write_text("x")  # hidden, as Spark writes them beside each entry
    assert [p.name for p in log_files(offsets)] == ["0", "1", "2", "10"]
    assert offsets.is_dir() and (offsets / "10").is_file() and not (offsets / "3").exists()
    assert json.loads((offsets / "10").read_text().splitlines()[2]) == {"batch": 10}
    with pytest.raises(FileNotFoundError):
        (offsets / "3").read_text()
    assert (offsets / "1").stat().st_size == len('v1\n{}\n{"batch": 1}\n')
    storage.remove_tree(offsets.parent)
    assert s3_lake.keys("lake/_checkpoints/") == [] or all(k.endswith("/") for k in s3_lake.keys("lake/_checkpoints/"))
    assert log_files(offsets) == []

    s3_lake.client().put_object(Bucket=s3_lake.name, Key="lake/landing/activity/a.json", Body=b"{}\n")
    assert [name for name, _, _ in storage.listing(paths.landing_path("landing/activity"))] == ["a.json"]


def test_system_tables_run_summaries_and_reports_land_in_the_bucket(s3_lake):
    columns = (("run_id", "string"), ("n", "bigint"))
    event_log = paths.event_log_path()
    assert system_tables.append(event_log, columns, [{"run_id": "r1", "n": 1}]) == 0
    assert system_tables.append(event_log, columns, [{"run_id": "r2", "n": 2}], app_id="a", batch_id=7) == 1
    state = delta_log.table_state(event_log)
    assert state is not None and (state.version, state.rows) == (1, 2)
    assert delta_log.latest_version(str(event_log)) == 1
    assert delta_log.committed_batch_in(event_log, 0, "a", 7)
    commits = [k for k in s3_lake.keys("lake/_system/event_log/_delta_log/") if k.endswith(".json")]
    assert commits == [f"lake/_system/event_log/_delta_log/{v:020d}.json" for v in (0, 1)]

    tables = [{"table": "bronze.activity", "outcome": "succeeded"}]
    summary = run_summary.merge("activity", "run-1", "manual", tables)
    assert str(summary).startswith(f"s3a://{s3_lake.name}/lake/_system/runs/activity/")
    assert run_summary.load("activity", "run-1")["tables"] == tables
    assert run_summary.latest("activity")["run_id"] == "run-1"

    pending_reprocess.begin("activity", "A/B", ["silver.activity"])
    assert pending_reprocess.owed("activity") == {"silver.activity"}
    pending_reprocess.done("activity", "A/B", "silver.activity")
    assert pending_reprocess.pending("activity") == []

    entry = {
        "pipeline": "activity",
        "table": "silver.activity",
        "suite": "activity_silver",
        "run_id": "run-1",
        "batch_id": 0,
        "mode": "run",
        "outcome": "passed",
        "element_count": 3,
        "validated_at": datetime.now(UTC).isoformat(),
        "expectations": [],
        "report_path": None,
    }
    index = reports.record(entry)
    reports.record(entry | {"batch_id": 1})
    assert str(index) == f"s3a://{s3_lake.name}/lake/_reports/index.html"
    assert [e["batch_id"] for e in reports.history()] == [0, 1]
    assert "silver.activity" in index.read_text()


@contextmanager
def requests_of(path: S3Path, operation: str) -> Iterator[list[int]]:
    """The status of every `operation` request the lake's own client makes while the block runs."""
    statuses: list[int] = []

    def seen(http_response, **_):
        statuses.append(http_response.status_code)

    events = path._s3.meta.events
    events.register(f"after-call.s3.{operation}", seen)
    try:
        yield statuses
    finally:
        events.unregister(f"after-call.s3.{operation}", seen)


def gate_entry(number: int) -> dict:
    return {
        "pipeline": f"pipeline{number}",
        "run_id": f"run-{number}",
        "table": "silver.activity",
        "suite": "silver.activity",
        "batch_id": number,
        "mode": "run",
        "outcome": "passed",
        "element_count": 1,
        "validated_at": datetime.now(UTC).isoformat(),
        "expectations": [],
        "report_path": None,
    }


def test_a_gate_line_written_between_our_read_and_our_write_is_kept(s3_lake):
    """Two pipelines gating at once, in the order that lost a line: both read the history, the other writes first.
    (The order is forced rather than left to threads: s3proxy 3.0.0 checks a PUT's condition and then writes,
    so writers racing within the same instant can all pass it, which AWS S3 never lets happen.)"""
    history = reports.history_path()
    reports.record(gate_entry(0))
    interrupted: list[int] = []

    def the_other_pipeline_gates(**_) -> None:  # just after our read of the history
        if not interrupted:
            interrupted.append(1)
            reports.record(gate_entry(1))

    events = history._s3.meta.events
    events.register("after-call.s3.GetObject", the_other_pipeline_gates)
    try:
        with requests_of(history, "PutObject") as puts:
            reports.record(gate_entry(2))
    finally:
        events.unregister("after-call.s3.GetObject", the_other_pipeline_gates)
    assert [e["batch_id"] for e in reports.history()] == [0, 1, 2]
    assert 412 in puts  # our first write was refused (the history had changed), then redone on the new version


def test_a_read_modify_write_that_keeps_losing_the_race_names_the_object(s3_lake):
    target = paths.lake_root() / "_reports" / "history.jsonl"

    def change_while_another_writes(current: bytes) -> bytes:
        target.write_bytes(current + b"theirs\n")  # another writer, in between every read and write
        return current + b"ours\n"

    with pytest.raises(ObjectStoreError) as refused:
        read_modify_write(target, change_while_another_writes, tries=3)
    assert f"{target} changed under every one of 3 conditional writes" in str(refused.value)
    assert "Fix: run again" in str(refused.value)
    assert target.read_text() == "theirs\n" * 3


def test_a_tree_is_removed_in_batches_of_keys(s3_lake):
    table = paths.lake_root() / "silver" / "activity"
    client = s3_lake.client()
    keys = [f"lake/silver/activity/part-{n}.parquet" for n in range(7)] + ["lake/silver/activity/_delta_log/0.json"]
    for key in keys:
        client.put_object(Bucket=s3_lake.name, Key=key, Body=b"x")
    client.put_object(Bucket=s3_lake.name, Key="lake/silver/activity_other/kept", Body=b"x")
    with requests_of(table, "DeleteObjects") as batches:
        table.remove_tree(batch_size=3)
    assert batches == [200, 200, 200]  # 8 keys: 3 + 3 + 2, one request each
    assert s3_lake.keys("lake/") == ["lake/silver/activity_other/kept"]
    table.remove_tree(batch_size=3)  # a missing tree is fine
