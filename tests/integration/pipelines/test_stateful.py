"""Stateful functions (`stateful:`, applyInPandasWithState) on real Spark + Delta, against plain-Python sessions.

A small pipeline: landing json -> bronze -> two tables keyed by device over the same events, with a 20-minute
inactivity gap and a 10-minute watermark delay: `gold.sessions` (append: each session once, when final) and
`gold.device_latest` (update: each device's latest session, MERGEd on the device). The reference sessionizes in
plain Python from scratch after every run: drop the events at or before the watermark the run started with, split
each device's kept events where two are more than the gap apart, and call a session final once the watermark
(newest event seen minus the delay) is past its last event + gap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from millpond.driver import runner
from millpond.lake import checkpoints, paths
from millpond.lake.delta_log import latest_version
from millpond.spec import load_pipeline
from spark_jobs.transforms.sessions import STATE_SCHEMA
from tests.support.lake_tables import event_log

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
GAP, DELAY = 20, 10  # minutes


def stateful_table(function: str, output: str, mode: str) -> dict:
    table = {
        "from": "bronze.events",
        "output_mode": mode,
        "watermark": {"column": "ts", "delay": f"{DELAY} minutes"},
        "stateful": {
            "function": f"spark_jobs.transforms.sessions:{function}",
            "key": ["device"],
            "output_schema": f"device STRING, session_start TIMESTAMP, session_end TIMESTAMP, {output}",
            "state_schema": STATE_SCHEMA,
            "timeout": "event_time",
            "options": {"timestamp": "ts", "gap": f"{GAP} minutes"},
        },
    }
    if mode == "update":
        table["keys"] = ["device"]
    return table


SPEC = {
    "pipeline": "visits",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 2,
    "sources": {"events": {"format": "json", "path": "landing/events", "schema": "ts TIMESTAMP, device STRING"}},
    "tables": {
        "bronze.events": {"from": "landing.events"},
        "gold.sessions": stateful_table("sessions", "events BIGINT", "append"),
        "gold.device_latest": stateful_table("latest_session", "events BIGINT, active BOOLEAN", "update"),
    },
}
TABLES = ("gold.sessions", "gold.device_latest")

# (minute after T0, device) per round. The comments give the watermark each run starts with (W).
ROUNDS = [
    [(0, "d1"), (5, "d1"), (12, "d1"), (45, "d1"), (50, "d1"), (3, "d2"), (30, "d2"), (55, "d3")],  # W none -> 45
    [
        (58, "d1"),  # extends d1's open session 45-50 (d1's 0-12 was final at W 45)
        (40, "d2"),
        (44, "d1"),  # before W 45: late, dropped (each would have joined an open session)
        (45, "d4"),  # exactly at W 45: late too (it would have joined d4's 62)
        (80, "d3"),  # 25 after d3's 55: a second open session of d3
        (62, "d4"),
        (70, "d6"),
    ],  # W 45 -> 70; d6 ends at 70 + gap = 90, so it stays open while W is 90 and ends at W 190
    [
        (72, "d3"),  # after W 70, 17 after 55 and 8 before 80: bridges d3's two open sessions into one
        (90, "d1"),
        (100, "d5"),
    ],  # W 70 -> 90
    [
        (200, "d9"),  # moves W to 190: every other session is final and leaves the state
        (85, "d1"),
    ],  # late: dropped
]


# ---------------------------------------------------------------------------------------------- the reference


@dataclass
class SessionsReference:
    """Every run's sessions, recomputed from all kept events (the function merges incrementally instead)."""

    watermark: int | None = None
    kept: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    dropped: list[int] = field(default_factory=list)  # late events per run
    emitted: list[set[tuple]] = field(default_factory=list)  # final sessions after each run
    open_keys: list[int] = field(default_factory=list)  # devices with an open session after each run

    def run(self, rows: list[tuple]) -> None:
        late = [r for r in rows if self.watermark is not None and r[0] <= self.watermark]
        for minute, device in rows:
            if (minute, device) not in late:
                self.kept[device].append(minute)
        newest = max(minute for minute, _ in rows) - DELAY
        self.watermark = newest if self.watermark is None else max(self.watermark, newest)
        self.dropped.append(len(late))
        self.emitted.append({s for s in self.sessions() if not self.is_open(s)})
        self.open_keys.append(len({s[0] for s in self.sessions() if self.is_open(s)}))

    def sessions(self) -> list[tuple]:
        """(device, first, last, events): sorted events split where the next is more than GAP after the last."""
        found = []
        for device, minutes in self.kept.items():
            current: list[int] = []
            for minute in sorted(minutes):
                if current and minute - current[-1] > GAP:
                    found.append((device, current[0], current[-1], len(current)))
                    current = []
                current.append(minute)
            found.append((device, current[0], current[-1], len(current)))
        return found

    def is_open(self, session: tuple) -> bool:
        return session[2] + GAP >= self.watermark

    def latest(self) -> dict[str, tuple]:
        """Each device's newest session: what gold.device_latest holds (start, end, events, active)."""
        table = {}
        for session in sorted(self.sessions(), key=lambda s: s[1]):
            table[session[0]] = (*session[1:], self.is_open(session))
        return table


def reference(rounds: list[list[tuple]]) -> SessionsReference:
    ref = SessionsReference()
    for rows in rounds:
        ref.run(rows)
    return ref


def test_the_reference_follows_the_rules_the_rows_were_designed_for():
    """Guard the hand-made data: sessions span runs, late events drop, d3's two open sessions merge."""
    ref = reference(ROUNDS)
    assert ref.dropped == [0, 3, 0, 1]
    assert ref.emitted[0] == {("d1", 0, 12, 3), ("d2", 3, 3, 1)}
    assert ("d1", 45, 58, 3) in ref.emitted[2] and ("d3", 55, 80, 3) in ref.emitted[3]  # spans runs, bridged
    assert ref.open_keys == [3, 4, 4, 1]
    assert ("d6", 70, 70, 1) not in ref.emitted[2] and ("d6", 70, 70, 1) in ref.emitted[3]  # final only past W
    assert ref.emitted[-1] == {s for s in ref.sessions() if s[0] != "d9"}


# ---------------------------------------------------------------------------------------------- the lake


def land(lake: Path, round_number: int) -> None:
    folder = lake / "landing" / "events"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"ts": (T0 + timedelta(minutes=m)).strftime("%Y-%m-%dT%H:%M:%S.000Z"), "device": d})
        for m, d in ROUNDS[round_number]
    ]
    tmp = folder / f".events-{round_number}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(folder / f"events-{round_number}.json")


def write_spec(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "visits.yaml").write_text(yaml.safe_dump(SPEC))


def minutes(ts: datetime) -> int:
    return int((ts.replace(tzinfo=UTC) - T0).total_seconds()) // 60


def read_sessions(spark) -> list[tuple]:
    """Every row of gold.sessions, duplicates kept (a session written twice would show twice)."""
    rows = spark.read.format("delta").load(str(paths.table_path("gold.sessions"))).collect()
    return [(r.device, minutes(r.session_start), minutes(r.session_end), r.events) for r in rows]


def read_latest(spark) -> dict[str, tuple]:
    rows = spark.read.format("delta").load(str(paths.table_path("gold.device_latest"))).collect()
    table = {r.device: (minutes(r.session_start), minutes(r.session_end), r.events, r.active) for r in rows}
    assert len(table) == len(rows), "gold.device_latest holds a device twice"
    return table


@pytest.fixture(scope="module")
def four_rounds(tmp_path_factory, spark):
    """Land and run every round; compare both tables after each run; keep the lake and each run's event log."""
    base = tmp_path_factory.mktemp("visits")
    lake, specs = base / "lake", base / "pipelines"
    lake.mkdir()
    write_spec(specs)
    logs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MILLPOND_LAKE", str(lake))
        mp.setenv("MILLPOND_PIPELINES", str(specs))
        for round_number in range(len(ROUNDS)):
            land(lake, round_number)
            assert runner.main(["visits", "--run-id", f"round-{round_number}"]) == 0
            logs.append(event_log(spark, f"round-{round_number}"))
            ref = reference(ROUNDS[: round_number + 1])
            assert sorted(read_sessions(spark)) == sorted(ref.emitted[-1]), f"gold.sessions after round {round_number}"
            assert read_latest(spark) == ref.latest(), f"gold.device_latest after round {round_number}"
    return lake, specs, logs


@pytest.fixture
def visits_lake(four_rounds, monkeypatch):
    lake, specs, logs = four_rounds
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    return lake, logs


def test_each_session_is_written_once_in_the_run_that_makes_it_final(spark, visits_lake):
    """four_rounds compared the tables after every run; here: no duplicate, and each run wrote only its new ones."""
    _, logs = visits_lake
    ref = reference(ROUNDS)
    sessions = read_sessions(spark)
    assert len(sessions) == len(set(sessions)) and set(sessions) == ref.emitted[-1]
    new_per_run = [len(now - before) for before, now in zip([set(), *ref.emitted], ref.emitted, strict=False)]
    assert [log["gold.sessions"].rows_written for log in logs] == new_per_run
    assert all(log[t].outcome == "succeeded" for log in logs for t in TABLES)


def test_late_events_are_counted_and_state_holds_only_open_sessions(visits_lake):
    _, logs = visits_lake
    ref = reference(ROUNDS)
    for table_id in TABLES:
        assert [log[table_id].rows_dropped_by_watermark for log in logs] == ref.dropped, table_id
        assert [log[table_id].state_rows for log in logs] == ref.open_keys, table_id
    assert logs[-1]["gold.sessions"].state_rows == 1  # six devices seen, only d9 has an open session


def test_a_run_with_nothing_new_changes_nothing(spark, visits_lake):
    before = {t: latest_version(paths.table_path(t)) for t in TABLES}
    assert runner.main(["visits", "--run-id", "idle"]) == 0
    assert {t: latest_version(paths.table_path(t)) for t in TABLES} == before
    assert sorted(read_sessions(spark)) == sorted(reference(ROUNDS).emitted[-1])


def test_a_spec_change_the_state_cannot_follow_asks_for_a_full_refresh(visits_lake):
    pipeline = load_pipeline("visits")
    table = pipeline.tables["gold.sessions"]
    stateful = table.stateful
    changes = {
        "gap": replace(stateful, options={**stateful.options, "gap": "30 minutes"}),
        "function": replace(stateful, function="spark_jobs.transforms.sessions:latest_session"),
        "state_schema": replace(stateful, state_schema="open_sessions STRING, note STRING"),
        "key": replace(stateful, key=("device", "ts")),
    }
    for what, changed in changes.items():
        with pytest.raises(checkpoints.CheckpointProblem) as refused:
            checkpoints.verify(pipeline, replace(table, stateful=changed))
        assert "stateful: " in str(refused.value), what
        assert "millpond run visits --full-refresh gold.sessions" in str(refused.value), what


# ---------------------------------------------------------------------------------------------- SIGKILL


def batch_logs(table_id: str) -> tuple[int, int]:
    """(batches in the offset log, batches in the commit log) of the table's checkpoint."""
    checkpoint = paths.checkpoint_path("visits", table_id)
    offsets, commits = (len(list((checkpoint / log).glob("[0-9]*"))) for log in ("offsets", "commits"))
    return offsets, commits


def run_killed_at(lake: Path, specs: Path, fault: str) -> None:
    env = {**os.environ, "MILLPOND_LAKE": str(lake), "MILLPOND_PIPELINES": str(specs), "MILLPOND_FAULT": fault}
    proc = subprocess.run(
        [MILLPOND, "run", "visits"], env=env, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_sigkilled_runs_then_reruns_write_each_session_once(spark, lake, tmp_path, monkeypatch, test_engine):
    """Killed between a table's Delta commit and Spark's commit log: the append of final sessions (even rounds),
    the MERGE of latest sessions (odd rounds). Each rerun replays the batch, Delta skips it, the state commits.
    On the engine the server's query outlives the killed run: after the append it goes on to record the batch in
    Spark's commit log (nothing is left to replay); after the MERGE it stops before, as a JVM of the run's own."""
    specs = tmp_path / "pipelines"
    write_spec(specs)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    for round_number in range(len(ROUNDS)):
        land(lake, round_number)
        ref = reference(ROUNDS[: round_number + 1])
        table_id = "gold.sessions" if round_number % 2 == 0 else "gold.device_latest"
        path = paths.table_path(table_id)
        before, (batches, _) = latest_version(path), batch_logs(table_id)
        if table_id == "gold.sessions":  # batch `batches` reads the round; the next moves the watermark: sessions end
            run_killed_at(lake, specs, f"{table_id}:after_write:{batches + 1}")
            assert sorted(read_sessions(spark)) == sorted(ref.emitted[-1])  # the sessions are in Delta, once ...
            recorded = batches + (2 if test_engine else 1)  # ... their batch is in the commit log only on the engine
            assert batch_logs(table_id) == (batches + 2, recorded)
        else:  # killed after the MERGE of the round's own batch
            run_killed_at(lake, specs, f"{table_id}:after_write:{batches}")
            assert latest_version(path) == before + 1 and batch_logs(table_id) == (batches + 1, batches)
        written = latest_version(path)
        assert runner.main(["visits", "--run-id", f"rerun-{round_number}"]) == 0
        assert all(offsets == commits for offsets, commits in map(batch_logs, TABLES))
        # sessions: the replayed batch is skipped. device_latest: skipped too; then the run's second batch (the
        # watermark moves, sessions end) MERGEs once.
        assert latest_version(path) == written + (0 if table_id == "gold.sessions" else 1), "a replay was written"
        assert sorted(read_sessions(spark)) == sorted(ref.emitted[-1])
        assert read_latest(spark) == ref.latest()
