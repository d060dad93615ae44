"""millpond.lake.backlog on the cases a run seldom makes: a Delta source offset part-way through a version or through
its starting snapshot, a commit the stream skips, and what a rate limit makes of the files waiting.

The upstream tables are real Delta tables (written by delta-rs); the checkpoints hold offsets in Spark's format, as
tests/integration/faults/test_kill.py sees Spark write them (that test compares the backlog with real runs)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from millpond.lake import paths
from millpond.lake.backlog import _batches, pipeline_backlog
from millpond.spec import load_pipeline
from tests.support.cdc_reference import CHANGE_FEED_SPEC, MIRROR, SCD1, write_spec

pytestmark = pytest.mark.unit


def write(rows: list[int], mode: str = "append") -> None:
    """One commit of bronze.activity holding one file per row (a column of its own, so each file has one row)."""
    for number, row in enumerate(rows):
        data = pa.table({"Index": pa.array([row], pa.int64())})
        write_deltalake(str(paths.table_path("bronze.activity")), data, mode=mode if number == 0 else "append")


def checkpoint(offset: dict | None, planned: dict | None = None) -> None:
    """silver.activity's checkpoint: batch 0 committed at `offset`, and maybe batch 1 planned at `planned`."""
    folder = paths.checkpoint_path("activity", "silver.activity")
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    for batch, entry in enumerate(o for o in (offset, planned) if o is not None):
        (folder / "offsets" / str(batch)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps(entry)
        )
    if offset is not None:
        (folder / "commits" / "0").write_text("v1\n{}")


def delta_offset(version: int, index: int = -1, starting: bool = False) -> dict:
    """A Delta source offset of bronze.activity as Spark logs it (`reservoirId` is the table's id)."""
    first = (paths.table_path("bronze.activity") / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    table_id = next(json.loads(line)["metaData"]["id"] for line in first if '"metaData"' in line)
    return {
        "sourceVersion": 1,
        "reservoirId": table_id,
        "reservoirVersion": version,
        "index": index,
        "isStartingVersion": starting,
    }


def added_bytes(first_version: int) -> int:
    """The bytes on disk of the data files bronze's commits from `first_version` on added."""
    log = paths.table_path("bronze.activity") / "_delta_log"
    total = 0
    for commit in sorted(log.glob("*.json")):
        if int(commit.name[:20]) >= first_version:
            for line in commit.read_text().splitlines():
                if '"add"' in line:
                    total += (paths.table_path("bronze.activity") / json.loads(line)["add"]["path"]).stat().st_size
    return total


def silver_waiting() -> dict:
    (waiting,) = pipeline_backlog(load_pipeline("activity"), tables=["silver.activity"])
    return waiting.as_dict()


def test_a_version_read_part_way_leaves_its_later_files_and_the_later_versions_waiting(lake):
    write([1, 2, 3])  # versions 0, 1, 2: one file each
    for _ in range(2):
        write([4])  # ... 3, 4
    checkpoint(delta_offset(2, index=-1))  # versions 0 and 1 read, 2 next
    waiting = silver_waiting()
    assert (waiting["files"], waiting["rows"], waiting["versions"]) == (3, 3, 3)
    assert waiting["bytes"] == added_bytes(2)
    assert not waiting["replayed_batch"] and waiting["batches"] == 1


def test_a_starting_snapshot_read_part_way_leaves_the_rest_of_it_waiting(lake):
    write([1, 2, 3])
    write([5])  # version 3, after the snapshot
    checkpoint(delta_offset(2, index=0, starting=True))  # the snapshot at version 2: its first file read
    waiting = silver_waiting()
    assert (waiting["files"], waiting["rows"]) == (3, 3)  # two of the snapshot's, version 3's one


def test_a_new_checkpoint_waits_for_the_whole_table_and_a_planned_batch_is_its_own(lake):
    write([1, 2])
    waiting = silver_waiting()
    assert (waiting["files"], waiting["versions"], waiting["batches"]) == (2, 1, 1)  # the snapshot: one version
    write([3])
    checkpoint(delta_offset(1, index=-1), planned=delta_offset(2, index=-1))  # batch 1 planned over version 1
    waiting = silver_waiting()
    assert (waiting["files"], waiting["batches"], waiting["replayed_batch"]) == (2, 2, True)


def test_a_commit_that_removes_rows_is_skipped_as_the_append_only_stream_skips_it(lake):
    write([1])
    checkpoint(delta_offset(1, index=-1))
    write([2, 3], mode="overwrite")  # version 1 removes version 0's file: skipChangeCommits skips it; 2 is read
    assert silver_waiting()["files"] == 1


def test_a_rate_limit_makes_batches_as_spark_and_delta_admit_files():
    assert _batches([], 1000, None) == 0
    assert _batches([1] * 2500, 1000, None) == 3
    assert _batches([10, 10, 10], None, 15, soft_bytes=False) == 3  # a file source: a batch stays within the bytes
    assert _batches([10, 10, 10], None, 15, soft_bytes=True) == 2  # Delta: admits while budget is left
    assert _batches([100], None, 15, soft_bytes=False) == 1  # at least one file per batch
    assert _batches([1] * 5, 2, 1000) == 3


def test_a_version_whose_first_file_was_read_leaves_its_other_files_waiting(lake):
    bronze = str(paths.table_path("bronze.activity"))
    for rows in ([1], [1, 2, 3]):  # version 0: one file; version 1: three (one per partition)
        data = pa.table({"Index": pa.array(rows, pa.int64()), "part": pa.array([f"p{r}" for r in rows])})
        write_deltalake(bronze, data, mode="append", partition_by=["part"])
    checkpoint(delta_offset(1, index=0))  # a rate limit stopped the batch after version 1's first file
    waiting = silver_waiting()
    assert (waiting["files"], waiting["rows"], waiting["versions"]) == (2, 2, 1)


def test_a_kafka_source_whose_broker_does_not_answer_is_said_not_waited_for(lake, monkeypatch):
    monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # nothing listens there
    monkeypatch.setattr("millpond.lake.backlog.KAFKA_TIMEOUT_SECONDS", 0.5)
    (waiting,) = pipeline_backlog(load_pipeline("device_status"), tables=["bronze.device_events"])
    assert (waiting.rows, waiting.batches, waiting.behind) == (None, None, None)
    assert waiting.note.startswith("not measured: no answer from 127.0.0.1:1")


def test_a_first_batch_planned_and_never_committed_is_replayed_from_its_own_snapshot(lake):
    write([1, 2, 3])  # versions 0-2
    DeltaTable(str(paths.table_path("bronze.activity"))).optimize.compact()  # version 3: no data change
    checkpoint(None, planned=delta_offset(2, index=0, starting=True))  # batch 0 planned over the snapshot's first file
    waiting = silver_waiting()
    assert (waiting["files"], waiting["rows"], waiting["replayed_batch"], waiting["batches"]) == (3, 3, True, 2)


def test_a_change_feed_reader_waits_for_each_commit_s_change_files(lake):
    """A table applying silver.customers' change data feed reads the change files (`cdc`) of its MERGE and DELETE
    commits, which an append reader would skip (they remove files): those are waiting, not the files rewritten."""
    pipeline = load_pipeline(write_spec(lake.parent, CHANGE_FEED_SPEC), lake_root=lake)
    upstream = str(paths.table_path(SCD1))
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "email": ["a@x", "b@x"]})
    write_deltalake(upstream, rows, configuration={"delta.enableChangeDataFeed": "true"})
    folder = paths.checkpoint_path("customers", MIRROR)
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    first = (paths.table_path(SCD1) / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    table_id = next(json.loads(line)["metaData"]["id"] for line in first if '"metaData"' in line)
    offset = {
        "sourceVersion": 1,
        "reservoirId": table_id,
        "reservoirVersion": 1,
        "index": -1,
        "isStartingVersion": False,
    }
    (folder / "offsets" / "0").write_text("v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps(offset))
    (folder / "commits" / "0").write_text("v1\n{}")  # version 0 read, 1 next
    update = pa.table({"id": pa.array([1], pa.int64()), "email": ["z@x"]})
    DeltaTable(upstream).merge(
        update, "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().execute()
    DeltaTable(upstream).delete("id = 2")
    change_files = [
        json.loads(line)["cdc"]
        for version in (1, 2)
        for line in (paths.table_path(SCD1) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
        if '"cdc"' in line
    ]
    (waiting,) = pipeline_backlog(pipeline, tables=[MIRROR])
    assert (waiting.files, waiting.versions) == (len(change_files), 2) == (2, 2)
    assert waiting.bytes == sum(c["size"] for c in change_files)
