"""Kafka in and out on a real broker (KRaft, millpond/dev/kafka_broker.py), against a plain-Python reference of what was sent.

A small pipeline: a Kafka topic of JSON device readings -> bronze.events (Delta, malformed values to its quarantine)
-> gold.alerts, which sends the hot readings to another topic. Messages go out round-robin over three partitions from
one producer, so the reference knows each one's (partition, offset) without asking Kafka.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from millpond.dev import kafka_broker as harness
from millpond.dev.kafka_broker import consume, produce
from millpond.driver import runner
from millpond.lake import paths
from millpond.runs import run_summary
from tests.support.backlog import backlog

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
PARTITIONS = 3
LIMIT = 7  # max_offsets_per_trigger
HOT = 30.0  # gold.alerts: readings above this


def spec(events: str, alerts: str) -> dict:
    return {
        "pipeline": "devices",
        "schedule": "@hourly",
        "start_date": "2026-11-01",
        "shuffle_partitions": 2,
        "sources": {
            "events": {
                "format": "kafka",
                "bootstrap_servers": "${MILLPOND_KAFKA_BOOTSTRAP}",
                "subscribe": [events],
                "schema": "device STRING, ts TIMESTAMP, temp DOUBLE",
                "rate_limit": {"max_offsets_per_trigger": LIMIT},
            }
        },
        "tables": {
            "bronze.events": {"from": "kafka.events"},
            "gold.alerts": {
                "from": "bronze.events",
                "transform": {"sql": f"SELECT device, ts, temp FROM source WHERE temp > {HOT}"},
                "sink": {
                    "format": "kafka",
                    "topic": alerts,
                    "key": "device",
                    "bootstrap_servers": "${MILLPOND_KAFKA_BOOTSTRAP}",
                },
            },  # value: the default
        },
    }


MALFORMED = [
    b"not json",
    b'{"device": "d1", "ts": "2026-11-01T00:00:00Z", "temp": "hot"}',
    b"[1, 2]",
    b'\xff\xfe{"device": "d2"}',
    b'{"device": "d3", "temp": 40.0',
]
SKIPPED = [None, b"  "]  # a tombstone and a blank value: no record, like a blank landed line


class Topic:
    """What the test sent to one topic, in order, and the reference computed from it alone."""

    def __init__(self, name: str):
        self.name, self.sent = name, []  # (partition, offset, key, value)
        self.next_offset = [0] * PARTITIONS

    def round(self, spark, bootstrap: str, number: int, count: int) -> None:
        """`count` readings plus every malformed and skipped kind, spread round-robin over the partitions."""
        values = [
            json.dumps(
                {
                    "device": f"d{i % 4}",
                    "ts": (T0 + timedelta(minutes=number * 100 + i)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                    "temp": float((i * 7 + number) % 50),
                }
            ).encode()
            for i in range(count)
        ]
        for position, value in enumerate(MALFORMED + SKIPPED):
            values.insert(1 + position * 3, value)
        messages = []
        for i, value in enumerate(values):
            partition = (len(self.sent) + i) % PARTITIONS
            messages.append((partition, f"k{number}-{i}".encode(), value))
        produce(spark, bootstrap, self.name, messages)
        for partition, key, value in messages:
            self.sent.append((partition, self.next_offset[partition], key.decode(), value))
            self.next_offset[partition] += 1

    def records(self) -> list[tuple]:
        """Every message with a non-blank value: what bronze plus its quarantine must hold."""
        return [m for m in self.sent if m[3] is not None and m[3].strip(b" \t")]

    def good(self) -> dict[tuple, tuple]:
        """(partition, offset) -> (key, device, ts, temp) for each value that is a JSON object of the right types."""
        rows = {}
        for partition, offset, key, value in self.records():
            try:
                record = json.loads(value.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("temp"), float):
                rows[(partition, offset)] = (key, record["device"], record["ts"], record["temp"])
        return rows

    def bad(self) -> set[str]:
        good = self.good()
        return {f"kafka:{self.name}/{p}/{o}" for p, o, _, _ in self.records() if (p, o) not in good}

    def alerts(self, good: dict | None = None) -> Counter:
        """What gold.alerts sends: key device, value the row as JSON; as a multiset of (key, device, ts, temp)."""
        rows = (good or self.good()).values()
        return Counter((d, d, ts, temp) for _, d, ts, temp in rows if temp > HOT)


def bronze(spark) -> dict[tuple, tuple]:
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(str(paths.table_path("bronze.events")))
    rows = frame.select(
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_key",
        "_kafka_topic",
        "device",
        F.date_format("ts", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("ts"),
        "temp",
    ).collect()
    assert len(rows) == len({(r[0], r[1]) for r in rows}), "a message is in bronze twice"
    return {(r[0], r[1]): (r[2], r[4], r[5], r[6]) for r in rows}


def quarantined(spark) -> list[str]:
    frame = spark.read.format("delta").load(str(paths.quarantine_path("bronze.events")))
    return sorted(r.source_file for r in frame.select("source_file", "reason").collect() if r.reason)


def sent_alerts(spark, bootstrap: str, topic: str) -> Counter:
    found = Counter()
    for row in consume(spark, bootstrap, topic):
        value = json.loads(row.value)
        ts = datetime.fromisoformat(value["ts"].replace("Z", "+00:00")).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        found[(row.key, value["device"], ts, value["temp"])] += 1
    return found


def summary(run_id: str) -> dict[str, dict]:
    return {t["table"]: t for t in run_summary.load("devices", run_id)["tables"]}


def bronze_batch_rows(spark) -> list[int]:
    """Rows each bronze micro-batch wrote (one Delta append per batch)."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{paths.table_path('bronze.events')}`").collect()
    return [int(h.operationMetrics["numOutputRows"]) for h in history if h.operation == "WRITE"]


@pytest.fixture
def topics(kafka_broker, lake, tmp_path, monkeypatch) -> tuple[Topic, str]:
    """Fresh topics for each test (the broker lives for the session), the spec, and the address in the environment."""
    suffix = uuid.uuid4().hex[:8]
    events, alerts = f"events-{suffix}", f"alerts-{suffix}"
    kafka_broker.create_topic(events, PARTITIONS)
    kafka_broker.create_topic(alerts, 2)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "devices.yaml").write_text(yaml.safe_dump(spec(events, alerts)))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))
    monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", kafka_broker.bootstrap)
    return Topic(events), alerts


def test_kafka_to_bronze_and_back_to_kafka_matches_what_was_sent(spark, kafka_broker, topics, lake):
    events, alerts = topics
    bootstrap = kafka_broker.bootstrap
    events.round(spark, bootstrap, 0, 30)
    # `millpond backlog` asks the broker for each partition's end (no JVM): every message sent is waiting
    waiting = backlog(lake, "devices")["bronze.events"]
    per_partition = Counter(f"{events.name}/{partition}" for partition, *_ in events.sent)
    assert waiting["behind"] == dict(per_partition) and waiting["rows"] == len(events.sent)
    assert waiting["batches"] == math.ceil(len(events.sent) / LIMIT)
    # `millpond preview` reads the topic in batches of --rows messages and writes nothing, not even offsets. A command
    # of its own: the preview starts a JVM of its own even beside an engine (`make test-engine`).
    previewed = subprocess.run(
        [MILLPOND, "preview", "devices", "bronze.events", "--batches", "2", "--rows", "4"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert previewed.returncode == 0, previewed.stdout[-3000:] + previewed.stderr[-3000:]
    shown = previewed.stdout
    assert "bronze.events (append mode) reads kafka.events 4 messages per micro-batch" in shown, shown
    sizes = [int(n) for n in re.findall(r"^batch \d+: (\d+) rows?", shown, re.MULTILINE)]
    assert len(sizes) == 2 and all(0 < n <= 4 for n in sizes) and "stopped after 2 micro-batches" in shown, shown
    assert any(line.startswith("| ") and "_kafka_offset" in line for line in shown.splitlines()), shown
    assert not list(lake.iterdir()), "preview wrote to the lake"
    assert runner.main(["devices", "--run-id", "r0"]) == 0
    assert bronze(spark) == events.good()
    assert quarantined(spark) == sorted(events.bad()) and len(events.bad()) == len(MALFORMED)
    assert sent_alerts(spark, bootstrap, alerts) == events.alerts() != Counter()
    first = summary("r0")
    records = len(events.records())
    assert first["bronze.events"]["rows_in"] == records  # tombstone and blank value skipped
    assert first["bronze.events"]["rows_written"] + first["bronze.events"]["rows_quarantined"] == records
    assert first["bronze.events"]["micro_batches"] >= math.ceil(len(events.sent) / LIMIT)  # max_offsets_per_trigger
    assert max(bronze_batch_rows(spark)) <= LIMIT
    assert first["gold.alerts"]["rows_written"] == sum(events.alerts().values())
    assert first["bronze.events"]["backlog_rows"] == len(events.sent)  # recorded by the run before Spark started
    assert backlog(lake, "devices")["bronze.events"]["rows"] == 0

    assert runner.main(["devices", "--run-id", "idle"]) == 0  # nothing new: the Kafka table still asks the broker
    idle = summary("idle")
    assert not idle["bronze.events"]["input_unchanged"] and idle["bronze.events"]["micro_batches"] == 0
    assert idle["bronze.events"]["version_after"] == first["bronze.events"]["version_after"]
    assert idle["gold.alerts"]["input_unchanged"] and idle["gold.alerts"]["rows_written"] == 0
    assert sent_alerts(spark, bootstrap, alerts) == events.alerts()

    sent_before = len(events.sent)
    events.round(spark, bootstrap, 1, 20)
    assert backlog(lake, "devices")["bronze.events"]["rows"] == len(events.sent) - sent_before
    assert runner.main(["devices", "--run-id", "r1"]) == 0
    assert bronze(spark) == events.good()
    assert quarantined(spark) == sorted(events.bad())
    assert sent_alerts(spark, bootstrap, alerts) == events.alerts()  # each alert exactly once: no crash, no replay
    assert max(bronze_batch_rows(spark)) <= LIMIT


def run_killed_at(lake: Path, fault: str | None) -> str:
    """A real `millpond run` in its own session, SIGKILLed by MILLPOND_FAULT (or finishing when fault is None)."""
    env = {**os.environ, "MILLPOND_LAKE": str(lake)}
    env.pop("MILLPOND_FAULT", None)
    if fault:
        env["MILLPOND_FAULT"] = fault
    done = subprocess.run(
        [MILLPOND, "run", "devices"], env=env, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    expected = -signal.SIGKILL if fault else 0
    assert done.returncode == expected, f"{fault}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def test_sigkills_leave_bronze_exact_and_the_kafka_sink_at_least_once(spark, kafka_broker, lake, topics, test_engine):
    """Bronze: killed between its table and quarantine writes, and after a Delta commit that Spark's commit log had
    not recorded; the reruns leave every message once. The sink: killed after sending a batch but before the commit
    log recorded it; the rerun sends that batch again, and only that batch is duplicated. On the engine the killed
    run's query goes on past the kill on the server and records the sent batch in the commit log (no commit of the
    sink is left to refuse it), so the rerun sends nothing again (docs/engine.md)."""
    events, alerts = topics
    bootstrap = kafka_broker.bootstrap
    events.round(spark, bootstrap, 0, 30)
    # `millpond backlog` asks the broker for each partition's end (no JVM): every message sent is waiting
    waiting = backlog(lake, "devices")["bronze.events"]
    per_partition = Counter(f"{events.name}/{partition}" for partition, *_ in events.sent)
    assert waiting["behind"] == dict(per_partition) and waiting["rows"] == len(events.sent)
    assert waiting["batches"] == math.ceil(len(events.sent) / LIMIT)
    run_killed_at(lake, "bronze.events:between_writes")  # the first batch with a malformed value
    run_killed_at(lake, "bronze.events:after_write:2")
    run_killed_at(lake, None)
    assert bronze(spark) == events.good()
    assert quarantined(spark) == sorted(events.bad())
    first_alerts = events.alerts()
    assert sent_alerts(spark, bootstrap, alerts) == first_alerts

    events.round(spark, bootstrap, 1, 20)
    run_killed_at(lake, "gold.alerts:after_write")  # gold's batch 1 = round 1's alerts, sent, not committed
    assert sent_alerts(spark, bootstrap, alerts) == events.alerts()  # sent once so far
    replayed = events.alerts() - first_alerts
    assert replayed != Counter()
    out = run_killed_at(lake, None)
    assert bronze(spark) == events.good()
    assert quarantined(spark) == sorted(events.bad())
    again = Counter() if test_engine else replayed  # round 1 twice (once on the engine), round 0 once
    assert sent_alerts(spark, bootstrap, alerts) == first_alerts + replayed + again
    gold = next(line for line in out.splitlines() if line.startswith("gold.alerts"))
    assert f" written={sum(again.values())} " in gold  # rows_written counts what the rerun sent again


def test_a_broker_that_cannot_start_fails_with_the_fix_or_its_log(tmp_path, monkeypatch):
    """No skipped Kafka tests: without the jars the fixture fails naming `make kafka-broker`; a broker that dies while
    starting (its port taken) fails with its log's tail, and leaves no process behind."""
    broker = harness.KafkaBroker(tmp_path / "busy")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", broker.port))
        taken.listen()
        with pytest.raises(harness.BrokerFailed, match=r"(?s)exited \d+ while starting; log .*broker.log:\n.+"):
            broker.start()
    assert broker.process is not None and broker.process.poll() is not None
    monkeypatch.setattr(harness, "JARS", tmp_path / "no-jars")
    with pytest.raises(harness.BrokerFailed, match="Kafka broker jars not found .* Fix: make kafka-broker"):
        harness.KafkaBroker(tmp_path / "nothing").start()


def test_a_cluster_id_never_starts_with_a_dash_so_the_storage_tool_formats_every_start(tmp_path):
    """A random id starting with '-' (first byte 0xF8-0xFB: 1 start in 64) made `StorageTool format` read it as an
    option and refuse: a broker start, and a CI run, failed by chance."""
    ids = [harness.cluster_id(bytes([first]) + uuid.uuid4().bytes[1:]) for first in range(256)]
    assert [i for i in ids if i.startswith(("-", "_")) or len(i) != 22] == []
    broker = harness.KafkaBroker(tmp_path / "dash")
    config = broker.write_config()
    formatted = subprocess.run(
        [
            "java",
            "-cp",
            broker.classpath(),
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            harness.cluster_id(bytes([0xF8]) + bytes(15)),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr


def test_sending_to_a_topic_the_broker_lacks_fails_at_once_with_the_fix(spark, kafka_broker):
    """`millpond generate device_status` before `make kafka-up` created the topic: no one-minute metadata wait."""
    with pytest.raises(
        harness.BrokerFailed,
        match=r"topic 'no-such-topic' does not exist on 127\.0\.0\.1:\d+\. Fix: "
        "make kafka-up",
    ):
        produce(spark, kafka_broker.bootstrap, "no-such-topic", [(None, b"d1", b"{}")])
