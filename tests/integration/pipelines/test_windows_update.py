"""Event-time windows in append and update mode, on real Spark + Delta, against a plain-Python reference.

A small pipeline (landing json -> bronze -> silver dedup -> three gold window tables) runs once per landed
round. The reference replays Spark's watermark rules by hand: a row's contribution to a window is dropped
when the window's end is at or before the watermark the batch started with; after each run the watermark
is the newest event time seen minus the delay, and append mode emits exactly the windows that ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from millpond.driver import runner
from millpond.driver.sinks import MergeSink
from millpond.lake import checkpoints, paths
from millpond.lake.delta_log import latest_version
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import load_pipeline
from tests.support import REPO
from tests.support.lake_tables import event_log

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
DELAY = 10  # minutes, every gold table's watermark delay
MEASURES = {"readings": "count(*)", "total": "sum(value)"}


def gold(duration: int, slide: int | None = None, mode: str = "append") -> dict:
    window = {"column": "ts", "duration": f"{duration} minutes", "as": "window_start"}
    if slide:
        window["slide"] = f"{slide} minutes"
    return {
        "from": "silver.readings",
        "output_mode": mode,
        "watermark": {"column": "ts", "delay": f"{DELAY} minutes"},
        "aggregate": {"window": window, "group_by": ["device"], "measures": MEASURES},
        "keys": ["window_start", "device"],
    }


SPEC = {
    "pipeline": "windows",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 2,
    "sources": {
        "readings": {
            "format": "json",
            "path": "landing/readings",
            "schema": "ts TIMESTAMP, device STRING, value BIGINT",
        }
    },
    "tables": {
        "bronze.readings": {"from": "landing.readings"},
        # dedup in update mode: every surviving row is written once, exactly as in append mode
        "silver.readings": {
            "from": "bronze.readings",
            "watermark": {"column": "ts", "delay": "1 day"},
            "dedup": {"keys": ["device", "ts"]},
            "output_mode": "update",
            "keys": ["device", "ts"],
        },
        "gold.tumbling": gold(10),
        "gold.sliding": gold(10, slide=5),
        "gold.sliding_latest": gold(10, slide=5, mode="update"),
    },
}
WINDOWS = {
    "gold.tumbling": (10, 10, "append"),
    "gold.sliding": (10, 5, "append"),
    "gold.sliding_latest": (10, 5, "update"),
}

# (minute after T0, device, value) per round. Late rows use devices of their own (d3..d6), so Spark's
# dropped-row count (taken after partial aggregation, per key) equals the number of dropped contributions.
ROUNDS = [
    [
        (1, "d1", 1),
        (3, "d1", 2),
        (7, "d1", 3),
        (12, "d1", 4),
        (18, "d1", 5),
        (24, "d1", 6),
        (2, "d2", 7),
        (9, "d2", 8),
        (15, "d2", 9),
        (22, "d2", 10),
        (3, "d1", 2),
    ],  # the last line repeats one: silver drops it
    [
        (26, "d1", 11),
        (31, "d1", 12),
        (38, "d1", 13),
        (44, "d1", 14),
        (28, "d2", 15),
        (35, "d2", 16),
        (41, "d2", 17),
        (5, "d3", 100),  # watermark 14: its tumbling window [0,10) is closed, sliding [5,15) is still open
        (13, "d2", 200),  # older than the watermark, but every window holding it is open: counted
        (12, "d1", 4),
    ],  # a duplicate of round 1: silver drops it
    [
        (47, "d1", 18),
        (52, "d1", 19),
        (58, "d1", 20),
        (63, "d1", 21),
        (50, "d2", 22),
        (61, "d2", 23),
        (20, "d4", 300),  # watermark 34: every window holding it is closed: dropped twice in sliding
        (33, "d5", 400),
    ],  # before the watermark, windows still open: counted
]


# ---------------------------------------------------------------------------------------------- the reference


@dataclass
class WindowReference:
    """One gold table after each run, computed the way the README says Spark computes it."""

    duration: int
    slide: int
    mode: str
    watermark: int | None = None
    state: dict[tuple, list[int]] = field(default_factory=dict)  # open windows: (start, device) -> [count, sum]
    table: dict[tuple, tuple[int, int]] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)  # contributions dropped by the watermark, per run
    state_rows: list[int] = field(default_factory=list)  # open windows after each run

    def starts(self, minute: int) -> Iterator[int]:
        first = (minute // self.slide) * self.slide
        return (s for s in range(first - self.duration + self.slide, first + 1, self.slide) if s <= minute)

    def run(self, rows: list[tuple]) -> None:
        dropped = 0
        for minute, device, value in rows:
            for start in self.starts(minute):
                if self.watermark is not None and start + self.duration <= self.watermark:
                    dropped += 1
                    continue
                acc = self.state.setdefault((start, device), [0, 0])
                acc[0], acc[1] = acc[0] + 1, acc[1] + value
                if self.mode == "update":
                    self.table[(start, device)] = tuple(acc)
        newest = max(minute for minute, _, _ in rows) - DELAY
        self.watermark = newest if self.watermark is None else max(self.watermark, newest)
        for key in [k for k in self.state if k[0] + self.duration <= self.watermark]:
            closed = self.state.pop(key)
            if self.mode == "append":
                self.table[key] = tuple(closed)
        self.dropped.append(dropped)
        self.state_rows.append(len(self.state))


def silver_rows(rounds: list[list[tuple]]) -> list[list[tuple]]:
    """Each round's rows after silver's dedup on (device, ts), across rounds too."""
    seen, result = set(), []
    for rows in rounds:
        fresh = []
        for row in rows:
            if (row[1], row[0]) not in seen:
                seen.add((row[1], row[0]))
                fresh.append(row)
        result.append(fresh)
    return result


def references(rounds: list[list[tuple]]) -> dict[str, WindowReference]:
    refs = {t: WindowReference(d, s, m) for t, (d, s, m) in WINDOWS.items()}
    for rows in silver_rows(rounds):
        for ref in refs.values():
            ref.run(rows)
    return refs


def test_the_reference_follows_the_rules_the_rows_were_designed_for():
    """Guard the hand-made data: it exercises late rows the way the comments in ROUNDS say."""
    refs = references(ROUNDS)
    assert refs["gold.tumbling"].dropped == [0, 1, 1]
    assert refs["gold.sliding"].dropped == [0, 1, 2]
    assert [r.watermark for r in refs.values()] == [53, 53, 53]
    assert (0, "d3") not in refs["gold.sliding_latest"].table and (5, "d3") in refs["gold.sliding_latest"].table


# ---------------------------------------------------------------------------------------------- the lake


def land(lake: Path, round_number: int) -> None:
    folder = lake / "landing" / "readings"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"ts": (T0 + timedelta(minutes=m)).strftime("%Y-%m-%dT%H:%M:%S.000Z"), "device": d, "value": v})
        for m, d, v in ROUNDS[round_number]
    ]
    tmp = folder / f".readings-{round_number}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(folder / f"readings-{round_number}.json")


def write_spec(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "windows.yaml").write_text(yaml.safe_dump(SPEC))


def read_gold(spark, table_id: str) -> dict[tuple, tuple[int, int]]:
    """(window start in minutes after T0, device) -> (readings, total); a duplicated key fails the test."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(str(paths.table_path(table_id)))
    rows = df.select(F.unix_timestamp("window_start").alias("start"), "device", "readings", "total").collect()
    table = {((r.start - int(T0.timestamp())) // 60, r.device): (r.readings, r.total) for r in rows}
    assert len(table) == len(rows), f"{table_id} holds a key twice"
    return table


@pytest.fixture(scope="module")
def three_rounds(tmp_path_factory, spark):
    """Land and run three rounds; keep the lake and each run's event log."""
    base = tmp_path_factory.mktemp("windows")
    lake, specs = base / "lake", base / "pipelines"
    lake.mkdir()
    write_spec(specs)
    logs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MILLPOND_LAKE", str(lake))
        mp.setenv("MILLPOND_PIPELINES", str(specs))
        for round_number in range(len(ROUNDS)):
            land(lake, round_number)
            assert runner.main(["windows", "--run-id", f"round-{round_number}"]) == 0
            logs.append(event_log(spark, f"round-{round_number}"))
            tables = {t: read_gold(spark, t) for t in WINDOWS}
            for table_id, ref in references(ROUNDS[: round_number + 1]).items():
                assert tables[table_id] == ref.table, f"{table_id} after round {round_number}"
    return lake, specs, logs


@pytest.fixture
def windows_lake(three_rounds, monkeypatch):
    lake, specs, logs = three_rounds
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    return lake, logs


def test_each_round_matches_the_reference_append_closed_windows_once_update_latest_values(spark, windows_lake):
    """three_rounds compared every gold table after every run; here: the final state and silver's dedup."""
    refs = references(ROUNDS)
    assert {t: read_gold(spark, t) for t in WINDOWS} == {t: r.table for t, r in refs.items()}
    assert max(start for start, _ in refs["gold.tumbling"].table) + 10 <= 53  # append: only closed windows
    assert any(start + 10 > 53 for start, _ in refs["gold.sliding_latest"].table)  # update: open ones too
    silver = spark.read.format("delta").load(str(paths.table_path("silver.readings")))
    assert silver.count() == sum(map(len, silver_rows(ROUNDS)))


def test_late_rows_and_state_rows_are_reported_per_run(windows_lake):
    _, logs = windows_lake
    refs = references(ROUNDS)
    for table_id, ref in refs.items():
        assert [log[table_id].rows_dropped_by_watermark for log in logs] == ref.dropped, table_id
        assert [log[table_id].state_rows for log in logs] == ref.state_rows, table_id
        assert all(log[table_id].outcome == "succeeded" for log in logs)


def test_a_run_with_nothing_new_changes_no_window(spark, windows_lake):
    before = {t: latest_version(paths.table_path(t)) for t in WINDOWS}
    assert runner.main(["windows", "--run-id", "idle"]) == 0
    assert {t: latest_version(paths.table_path(t)) for t in WINDOWS} == before
    assert {t: read_gold(spark, t) for t in WINDOWS} == {t: r.table for t, r in references(ROUNDS).items()}


def test_switching_append_and_update_on_a_checkpoint_is_refused_with_the_fix(windows_lake):
    pipeline = load_pipeline("windows")
    for table_id, other in (("gold.sliding", "update"), ("gold.sliding_latest", "append")):
        table = pipeline.tables[table_id]
        with pytest.raises(checkpoints.CheckpointProblem) as refused:
            checkpoints.verify(pipeline, replace(table, output_mode=other))
        message = str(refused.value)
        assert f'output_mode: "{table.output_mode}" -> "{other}"' in message
        assert f"millpond run windows --full-refresh {table_id}" in message
    silver = pipeline.tables["silver.readings"]  # dedup only: update runs as append, so the switch is harmless
    checkpoints.verify(pipeline, replace(silver, output_mode="append"))


# ---------------------------------------------------------------------------------------------- MERGE replays


def test_delta_skips_a_merge_whose_batch_id_it_already_committed(spark, lake):
    """The txnAppId/txnVersion session confs are honoured by MERGE (Delta 4): the replay writes nothing."""
    table = load_pipeline(write_spec_here(lake)).tables["gold.sliding_latest"]
    writer = MergeSink(spark, table, "millpond:test", RunContext("t"), TableResult(table.id, "gold", T0))
    path = paths.table_path(table.id)
    first = spark.createDataFrame(
        [(T0, "d1", 1, 10)], "window_start TIMESTAMP, device STRING, readings BIGINT, total BIGINT"
    )
    writer.write_batch(first, 0)
    changed = spark.createDataFrame([(T0, "d1", 2, 30), (T0, None, 1, 5)], first.schema)
    writer.write_batch(changed, 1)
    version = latest_version(path)
    replayed = spark.createDataFrame([(T0, "d1", 99, 99)], first.schema)  # what a wrong replay would write
    writer.write_batch(replayed, 1)
    assert latest_version(path) == version
    rows = {(r.device, r.readings, r.total) for r in spark.read.format("delta").load(str(path)).collect()}
    assert rows == {("d1", 2, 30), (None, 1, 5)}  # merged on the keys, a null group is a group of its own
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) is None  # the confs do not linger


def write_spec_here(lake: Path) -> Path:
    write_spec(lake.parent / "pipelines")
    return lake.parent / "pipelines" / "windows.yaml"


ONLY_MERGE = "bronze.readings,silver.readings,gold.sliding_latest"  # the kill test skips the append tables


def run_killed_after_merge(lake: Path, specs: Path, table_id: str) -> None:
    env = {
        **os.environ,
        "MILLPOND_LAKE": str(lake),
        "MILLPOND_PIPELINES": str(specs),
        "MILLPOND_FAULT": f"{table_id}:after_write",
    }
    proc = subprocess.run(
        [MILLPOND, "run", "windows", "--tables", ONLY_MERGE],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-2000:] + proc.stderr[-2000:]


def uncommitted_batches(table_id: str) -> int:
    checkpoint = paths.checkpoint_path("windows", table_id)
    return len(list((checkpoint / "offsets").glob("[0-9]*"))) - len(list((checkpoint / "commits").glob("[0-9]*")))


def test_a_crash_after_the_merge_replays_without_writing_twice(spark, lake, tmp_path, monkeypatch):
    """Killed after the table write (create, then MERGE) and before Spark's commit: the rerun skips the write."""
    specs = tmp_path / "pipelines"
    write_spec(specs)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    table_id, path = "gold.sliding_latest", paths.table_path("gold.sliding_latest")
    for round_number in range(2):  # round 0: the batch that creates the table; round 1: a MERGE
        land(lake, round_number)
        before = latest_version(path)
        run_killed_after_merge(lake, specs, table_id)
        written = latest_version(path)
        assert written == before + 1 and uncommitted_batches(table_id) == 1  # in Delta, not in the checkpoint
        assert runner.main(["windows", "--tables", ONLY_MERGE, "--run-id", f"rerun-{round_number}"]) == 0
        assert latest_version(path) == written, "the replayed batch was written again"
        assert uncommitted_batches(table_id) == 0
        assert read_gold(spark, table_id) == references(ROUNDS[: round_number + 1])[table_id].table


def test_an_update_aggregate_without_a_window_merges_the_latest_value_per_key(spark, lake, tmp_path, monkeypatch):
    """Update mode on a plain group_by with max_by (the "latest value per key" shape): two rounds, each MERGEd."""
    from millpond.dev.sample_data import activity_files
    from tests.support.reference import activity_reference

    spec = yaml.safe_load((REPO / "pipelines" / "activity.yaml").read_text())
    spec["tables"].pop("gold.activity_hourly")
    spec["tables"]["silver.activity"].pop("expectations")
    spec["tables"]["gold.device_counts"].update(
        output_mode="update",
        aggregate={
            "group_by": ["Device"],
            "measures": {"total_recordings": "count(*)", "latest_index": "max_by(Index, struct(Recorded_At, Index))"},
        },
    )
    (tmp_path / "activity.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(tmp_path))
    landing = lake / "landing" / "activity"
    for round_number in range(2):
        activity_files(landing, 1, 200, duplicates=0.1, seed=40 + round_number)
        assert runner.main(["activity", "--run-id", f"latest-{round_number}"]) == 0
        expected: dict[str, tuple] = {}
        for device, index, recorded_at in activity_reference(landing).silver:
            count, latest = expected.get(device, (0, None))
            expected[device] = (count + 1, max(latest or (recorded_at, index), (recorded_at, index)))
        rows = spark.read.format("delta").load(str(paths.table_path("gold.device_counts"))).collect()
        assert {r.Device: (r.total_recordings, r.latest_index) for r in rows} == {
            device: (count, latest[1]) for device, (count, latest) in expected.items()
        }, f"after round {round_number}"
