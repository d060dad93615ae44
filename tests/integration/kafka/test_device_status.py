"""The device_status example (pipelines/device_status.yaml) on a real broker, against tests/support/device_status_reference.py.

The shipped spec with its two topics renamed per test (the broker lives for the session). Three rounds of device
events, each run through the runner or the `millpond` CLI: out-of-order events, late ones, a malformed value, rows the
gate sets aside, a device going quiet until the watermark closes its session by the timeout. After every run each
table equals the reference; two of the runs are SIGKILLed first (after silver.device_status's MERGE, and after the
alerts were sent, each before Spark's commit log) and rerun.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from millpond.dev.kafka_broker import consume
from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from tests.support import REPO
from tests.support.device_status_reference import PARTITIONS, ROUNDS, Feed, minutes
from tests.support.lake_tables import event_log

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")
SPEC = REPO / "pipelines" / "device_status.yaml"
TABLES = (
    "bronze.device_events",
    "silver.device_events",
    "silver.device_status",
    "gold.device_sessions",
    "gold.device_alerts",
)


def write_spec(folder: Path, events: str, alerts: str) -> None:
    """The shipped spec, unchanged but for the topic names."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["sources"]["device_events"]["subscribe"] = [events]
    spec["tables"]["gold.device_alerts"]["sink"]["topic"] = alerts
    folder.mkdir(exist_ok=True)
    (folder / "device_status.yaml").write_text(yaml.safe_dump(spec))


def new_topics(kafka_broker) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    events, alerts = f"device_events-{suffix}", f"device_alerts-{suffix}"
    kafka_broker.create_topic(events, PARTITIONS)
    kafka_broker.create_topic(alerts, 1)
    return events, alerts


# ---------------------------------------------------------------------------------------------- the tables


def read(spark, table_id: str, quarantine: bool = False):
    path = paths.quarantine_path(table_id) if quarantine else paths.table_path(table_id)
    return spark.read.format("delta").load(str(path))


def bronze(spark) -> dict[tuple, tuple]:
    from pyspark.sql import functions as F

    rows = (
        read(spark, "bronze.device_events")
        .select(
            "_kafka_partition",
            "_kafka_offset",
            "_kafka_key",
            "device_id",
            F.date_format("event_time", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
            "status",
            "battery",
        )
        .collect()
    )
    assert len(rows) == len({(r[0], r[1]) for r in rows}), "a message is in bronze twice"
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def silver(spark) -> dict[tuple, tuple]:
    rows = read(spark, "silver.device_events").collect()
    assert len(rows) == len({(r._kafka_partition, r._kafka_offset) for r in rows}), "an event is in silver twice"
    return {
        (r._kafka_partition, r._kafka_offset): (r.device_id, minutes(r.event_time), r.status, r.battery) for r in rows
    }


def set_aside(spark) -> dict[tuple, str]:
    """The gate's quarantine: each row's address (from `raw`, the row as JSON) and the rules it failed."""
    rows = read(spark, "silver.device_events", quarantine=True).collect()
    found = {}
    for row in rows:
        raw = json.loads(row.raw)
        found[(raw["_kafka_partition"], raw["_kafka_offset"])] = row.rule
    assert len(found) == len(rows), "a row was set aside twice"
    return found


def device_status(spark) -> dict[str, tuple]:
    rows = read(spark, "silver.device_status").collect()
    table = {r.device_id: (r.status, r.battery, minutes(r.last_event_time), r.events) for r in rows}
    assert len(table) == len(rows), "silver.device_status holds a device twice"
    return table


def sessions(spark) -> list[tuple]:
    """Every row, duplicates kept: a session written twice would show twice."""
    rows = read(spark, "gold.device_sessions").collect()
    return sorted((r.device_id, minutes(r.session_start), minutes(r.session_end), r.events) for r in rows)


def sent_alerts(spark, bootstrap: str, topic: str) -> Counter:
    found = Counter()
    for row in consume(spark, bootstrap, topic):
        value = json.loads(row.value)
        minute = minutes(datetime.fromisoformat(value["event_time"].replace("Z", "+00:00")))
        found[(row.key, value["device_id"], minute, value["status"], value["battery"])] += 1
    return found


def assert_tables_match(spark, feed: Feed, runs: list | None = None) -> None:
    """Every Delta table against the reference (the alerts topic is checked by the caller: it may hold replays)."""
    assert bronze(spark) == feed.bronze()
    quarantined = sorted(r.source_file for r in read(spark, "bronze.device_events", quarantine=True).collect())
    assert quarantined == feed.bronze_quarantine()
    assert silver(spark) == feed.silver()
    assert set_aside(spark) == feed.silver_quarantine()
    assert device_status(spark) == feed.device_status()
    final, _, _ = feed.sessions(runs)
    assert sessions(spark) == sorted(final)


def batch_logs(table_id: str) -> tuple[int, int]:
    """(batches in the offset log, batches in the commit log) of the table's checkpoint."""
    checkpoint = paths.checkpoint_path("device_status", table_id)
    offsets, commits = (len(list((checkpoint / log).glob("[0-9]*"))) for log in ("offsets", "commits"))
    return offsets, commits


def run_killed_at(fault: str) -> None:
    """A real `millpond run device_status` in its own session, SIGKILLed where MILLPOND_FAULT says."""
    env = {**os.environ, "MILLPOND_FAULT": fault}
    done = subprocess.run(
        [MILLPOND, "run", "device_status"], env=env, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    assert done.returncode == -signal.SIGKILL, (
        f"{fault}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )


# ---------------------------------------------------------------------------------------------- the test


def test_the_reference_follows_the_rules_the_rounds_were_designed_for(monkeypatch):
    """Guard the hand-made rounds: what each is meant to show is what the reference computes."""
    monkeypatch.setattr("millpond.dev.kafka_broker.produce", lambda *args: None)
    feed = Feed("events")
    for items in ROUNDS:
        feed.send(None, "", items)
    assert len(feed.bronze_quarantine()) == 2 and set(feed.silver_quarantine().values()) == {
        "known_status",
        "battery_in_range",
    }
    latest = feed.device_status()
    assert latest["d1"] == ("error", 30.0, 75, 5) and latest["d3"][2] == 35  # out of order: the newest wins
    assert latest["d2"] == ("warning", 60.0, 28, 3)  # a late event is still the newest
    assert [feed.sessions(feed.runs[:n])[1:] for n in (1, 2, 3)] == [([0], 4), ([0, 1], 3), ([0, 1, 0], 2)]
    assert ("d4", 40, 40, 1) in feed.sessions()[0] - feed.sessions(feed.runs[:2])[0]  # quiet d4: closed by timeout
    assert sum(feed.alerts().values()) == 5


def test_rounds_with_sigkills_leave_every_table_equal_to_the_reference(
    spark, kafka_broker, lake, tmp_path, monkeypatch, test_engine
):
    events, alerts = new_topics(kafka_broker)
    write_spec(tmp_path / "pipelines", events, alerts)
    monkeypatch.setenv("MILLPOND_PIPELINES", str(tmp_path / "pipelines"))
    monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", kafka_broker.bootstrap)
    bootstrap, feed = kafka_broker.bootstrap, Feed(events)

    # Round 0 through the runner.
    feed.send(spark, bootstrap, ROUNDS[0])
    assert runner.main(["device_status", "--run-id", "round-0"]) == 0
    assert_tables_match(spark, feed)
    assert sent_alerts(spark, bootstrap, alerts) == feed.alerts()
    logs = [event_log(spark, "round-0")]

    # Round 1: `millpond run` killed after silver.device_status's MERGE, before Spark's commit log; then rerun.
    feed.send(spark, bootstrap, ROUNDS[1])
    path = paths.table_path("silver.device_status")
    before, (batches, _) = latest_version(path), batch_logs("silver.device_status")
    run_killed_at("silver.device_status:after_write")
    assert latest_version(path) == before + 1 and batch_logs("silver.device_status") == (batches + 1, batches)
    assert runner.main(["device_status", "--run-id", "round-1"]) == 0
    assert latest_version(path) == before + 1, "the replayed MERGE was written again"
    assert all(offsets == commits for offsets, commits in map(batch_logs, TABLES[:4]))
    assert_tables_match(spark, feed)
    assert sent_alerts(spark, bootstrap, alerts) == feed.alerts()  # the killed run had not reached the alerts
    logs.append(event_log(spark, "round-1"))

    # Round 2: killed after the alerts batch was sent, before Spark's commit log. A JVM of the run's own dies there:
    # the rerun sends that batch again (at least once). On the engine the run is killed but the server's query goes
    # on and records the batch in its commit log: the rerun has nothing to send again.
    feed.send(spark, bootstrap, ROUNDS[2])
    earlier, (batches, _) = sent_alerts(spark, bootstrap, alerts), batch_logs("gold.device_alerts")
    run_killed_at("gold.device_alerts:after_write")
    replayed = feed.alerts() - earlier
    assert replayed != Counter() and sent_alerts(spark, bootstrap, alerts) == feed.alerts()
    assert batch_logs("gold.device_alerts") == (batches + 1, batches + (1 if test_engine else 0))
    assert runner.main(["device_status", "--run-id", "round-2"]) == 0
    assert_tables_match(spark, feed)
    assert sent_alerts(spark, bootstrap, alerts) == earlier + replayed + (Counter() if test_engine else replayed)
    logs.append(event_log(spark, "round-2"))

    # The sessions' state: down to the devices with an open session. (Its late events were dropped in the killed
    # runs, which record nothing: the sessions table runs before silver.device_status and the alerts.)
    _, _, open_devices = feed.sessions()
    assert logs[-1]["gold.device_sessions"].state_rows == open_devices
    assert all(log[t].outcome == "succeeded" for log in logs for t in TABLES)
