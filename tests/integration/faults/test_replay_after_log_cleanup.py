"""A batch replayed after Delta's log cleanup removed the commit that wrote it is still written only once.

The run is SIGKILLed after a table's Delta commit and before Spark's commit log. Then no run succeeds for longer than
the table's `delta.logRetentionDuration` while other commits make Delta write a checkpoint, and Delta's cleanup
deletes every commit file of that batch. Only Delta's transaction state, which every checkpoint keeps, still knows
the batch: the rerun must skip it. Each table kind is covered: a landing append and its quarantine (bronze), a gated
append (silver), complete-mode overwrites (gold, committed by delta-rs), and an update-mode MERGE.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths, small_overwrite, system_tables
from millpond.lake.delta_log import latest_version
from tests.integration.faults.test_kill import run_killed_at, run_to_the_end
from tests.integration.pipelines.test_windows_update import (
    ONLY_MERGE,
    ROUNDS,
    land,
    read_gold,
    references,
    run_killed_after_merge,
    write_spec,
)
from tests.support.lake_tables import assert_matches_reference, data_commits_without_txn
from tests.support.reference import activity_reference
from tests.support.stress import run_in_process

pytestmark = pytest.mark.integration


def commits_holding_txn(table: Path) -> dict[int, int]:
    """Commit files still in the log that carry a `txn` action: {commit version: batch id}."""
    found = {}
    for commit in (table / "_delta_log").glob("[0-9]" * 20 + ".json"):
        for line in commit.read_text(encoding="utf-8").splitlines():
            if '"txn"' in line:
                found[int(commit.name[:20])] = json.loads(line)["txn"]["version"]
    return found


def expire_log(spark, table: Path, downstream: str = "") -> int:
    """What Delta's log cleanup leaves once a crashed batch's commit is older than `delta.logRetentionDuration`, and
    the table's version after it. A later commit (a property change) follows the batch's; the tables reading this
    one as a stream read past both (a stream cannot resume inside commits cleanup removed, so the retention must
    outlast the gap between runs); Delta writes a checkpoint at the newest version (the later commit sets
    `delta.checkpointInterval` to 1: plain SQL, so on the engine's Connect session too); and every commit file up to
    the batch's is removed, as cleanup removes them. delta-spark 4.4's own cleanup, run at a checkpoint with a 1-hour
    retention and every log file dated three days back, deleted none ("Deleted 0 log files"), so the files are
    removed here. The batch's commit must then be gone from the log."""
    batch_commit = max(commits_holding_txn(table))
    batch = commits_holding_txn(table)[batch_commit]
    later = f"'millpond.test.later' = '{time.time_ns()}', 'delta.checkpointInterval' = '1'"
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ({later})")  # checkpointed: an interval of 1 commit
    if downstream:
        assert runner.main(["activity", "--tables", downstream, "--run-id", f"downstream-{time.time_ns()}"]) == 0
    newest = latest_version(table)
    assert newest > batch_commit and (table / "_delta_log" / f"{newest:020d}.checkpoint.parquet").exists()
    for file in (table / "_delta_log").iterdir():
        if file.name[:20].isdigit() and int(file.name[:20]) <= batch_commit and file.suffix in (".json", ".crc"):
            file.unlink()
    for crc in (table / "_delta_log").glob(".*.crc"):  # Hadoop's checksums, of removed files among them
        crc.unlink()
    assert batch not in commits_holding_txn(table).values(), f"the batch's commit is still in {table}'s log"
    return newest


def test_replays_after_log_cleanup_write_nothing_twice_in_every_activity_table(spark, lake):
    landing = lake / "landing" / "activity"
    bronze, quarantine = paths.table_path("bronze.activity"), paths.quarantine_path("bronze.activity")
    silver, gold = paths.table_path("silver.activity"), paths.table_path("gold.device_counts")
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=11)
    run_in_process()

    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=12)
    run_killed_at(lake, "bronze.activity:after_write")  # bronze and its quarantine committed batch 1
    kept = {
        bronze: expire_log(spark, bronze, "silver.activity,gold.device_counts,gold.activity_hourly"),
        quarantine: expire_log(spark, quarantine),
    }
    assert system_tables.driver_writable(system_tables.open_table(quarantine))  # its replay is delta-rs's to skip
    run_to_the_end(lake)  # replays bronze's batch 1 first, in a fresh process as a crashed run's retry would
    assert {table: latest_version(table) for table in kept} == kept, "a replayed bronze batch was written again"
    assert_matches_reference(spark, activity_reference(landing))

    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=13)
    run_killed_at(lake, "gold.device_counts:after_write")
    newest = spark.sql(f"DESCRIBE HISTORY delta.`{gold}`").orderBy("version", ascending=False).first()
    assert newest.engineInfo.startswith("delta-rs"), newest  # the speed-up's commit is the one replayed
    kept[gold] = expire_log(spark, gold)
    schema = spark.read.format("delta").load(str(gold)).schema.jsonValue()
    assert small_overwrite.table_to_overwrite(gold, schema) is not None  # its replay is delta-rs's to skip
    run_in_process()
    assert latest_version(gold) == kept[gold], "the replayed gold batch was written again"

    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=14)
    run_killed_at(lake, "silver.activity:after_write")
    kept[silver] = expire_log(spark, silver, "gold.device_counts,gold.activity_hourly")
    run_in_process()
    assert latest_version(silver) == kept[silver], "the replayed silver batch was written again"
    assert_matches_reference(spark, activity_reference(landing))
    assert data_commits_without_txn(lake) == []


def test_a_replayed_merge_after_log_cleanup_writes_nothing(spark, lake, tmp_path, monkeypatch):
    specs = tmp_path / "pipelines"
    write_spec(specs)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    table_id, path = "gold.sliding_latest", paths.table_path("gold.sliding_latest")
    land(lake, 0)
    assert runner.main(["windows", "--tables", ONLY_MERGE, "--run-id", "first"]) == 0
    land(lake, 1)
    run_killed_after_merge(lake, specs, table_id)  # the MERGE of batch 1 committed, Spark's commit log not
    version = expire_log(spark, path)
    assert runner.main(["windows", "--tables", ONLY_MERGE, "--run-id", "rerun"]) == 0
    assert latest_version(path) == version, "the replayed MERGE was written again"
    assert read_gold(spark, table_id) == references(ROUNDS[:2])[table_id].table
    assert data_commits_without_txn(lake) == []
