"""The device_status example the way a user runs it, on a real broker and a real Airflow run.

`make kafka-up` (a free port, its own home) starts the local broker and creates the spec's topics; `millpond generate
device_status` sends two hours of events (late ones, malformed ones, an unknown status the gate sets aside); one
`airflow dags test device_status` runs every table; every table and the alerts topic then equal the plain-Python
reference of tests/support/device_status_reference.py, computed from the messages the topic holds. A second `generate`
continues after the newest event time, and `make kafka-down` leaves nothing listening. (Rounds, crashes and reruns
are tests/integration/kafka/test_device_status.py's, through `millpond run`; a DAG run costs ~2 minutes, so CI runs one.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from datetime import datetime, timedelta

import pytest

from millpond.dev.kafka_broker import consume, free_port
from millpond.runs import run_summary
from tests.integration.kafka.test_device_status import TABLES, assert_tables_match, sent_alerts, write_spec
from tests.support import REPO
from tests.support.airflow_run import airflow_env, dags_test, migrate, spark_processes
from tests.support.device_status_reference import Feed

pytestmark = [pytest.mark.integration, pytest.mark.outside_ci]  # docs/testing.md: still outside CI

MILLPOND = os.path.join(os.path.dirname(sys.executable), "millpond")


def make(target: str, env: dict[str, str], *variables: str) -> subprocess.CompletedProcess:
    """A Makefile target as a user runs it (`-o`: the venv and jars are this session's, not rebuilt)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", "setup", "-o", "kafka-broker", target, *variables],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"make {target}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def generate(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [MILLPOND, "generate", "device_status", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def event_times(messages) -> list[datetime]:
    times = []
    for message in messages:
        try:
            times.append(datetime.fromisoformat(json.loads(message.value)["event_time"]))
        except (ValueError, TypeError, KeyError):  # the malformed ones
            continue
    return times


def test_generated_events_through_a_dag_run_match_the_reference(tmp_path, spark, monkeypatch):
    lake, home, port = tmp_path / "lake", tmp_path / "kafka", free_port()
    lake.mkdir()
    suffix = uuid.uuid4().hex[:8]
    events, alerts = f"device_events-{suffix}", f"device_alerts-{suffix}"
    write_spec(tmp_path / "pipelines", events, alerts)
    user = {**os.environ, "MILLPOND_LAKE": str(lake), "MILLPOND_PIPELINES": str(tmp_path / "pipelines")}
    user.pop("MILLPOND_KAFKA_BOOTSTRAP", None)

    up = make("kafka-up", user, f"KAFKA_PORT={port}", f"KAFKA_HOME={home}").stdout
    bootstrap = f"127.0.0.1:{port}"
    try:
        assert f"export MILLPOND_KAFKA_BOOTSTRAP={bootstrap}" in up and f"topic {events}" in up, up
        assert f"topic {alerts}" in up, "kafka-up creates the topics the sink sends to as well"
        user["MILLPOND_KAFKA_BOOTSTRAP"] = bootstrap
        sent = generate(user, "--files", "2", "--rows", "150", "--malformed", "0.03", "--seed", "5")
        assert f"to topic {events} on {bootstrap}: 2 hour(s) of events from 2026-11-01 00:00 UTC" in sent, sent

        env = airflow_env(
            tmp_path / "airflow_home",
            lake,
            MILLPOND_KAFKA_BOOTSTRAP=bootstrap,
            MILLPOND_PIPELINES=str(tmp_path / "pipelines"),
        )
        migrate(env)
        rc, log = dags_test(env, "2026-11-02T05:00:00+00:00", tmp_path / "run.log", dag_id="device_status")
        assert rc == 0, log[-3000:]

        messages = consume(spark, bootstrap, events)
        feed = Feed(events)
        feed.sent = [(m.partition, m.offset, m.key, m.value.encode()) for m in messages]
        feed.runs = [list(feed.silver().values())]  # one run read them all
        assert feed.bronze_quarantine() and feed.silver_quarantine(), "the generator sends malformed and set-aside rows"
        monkeypatch.setenv("MILLPOND_LAKE", str(lake))
        assert_tables_match(spark, feed)
        assert sent_alerts(spark, bootstrap, alerts) == feed.alerts()

        printed = next(
            line for line in log.splitlines() if line.startswith("run ") and " of pipeline device_st" in line
        )
        summary = run_summary.load("device_status", printed.split()[1])
        assert sorted(t["table"] for t in summary["tables"]) == sorted(TABLES)
        assert all(t["outcome"] == "succeeded" for t in summary["tables"]), summary
        gate = next(t for t in summary["tables"] if t["table"] == "silver.device_events")["gate"]
        assert gate["outcome"] == "warned" and gate["rows_set_aside"] == len(feed.silver_quarantine()), gate
        assert spark_processes(lake) == [], "a Spark process outlived the DAG run"

        # The next hour's events start after the newest event time already in the topic.
        newest = max(event_times(messages))
        generate(user, "--files", "1", "--rows", "20", "--seed", "6")
        later = event_times(consume(spark, bootstrap, events)[len(messages) :])
        next_hour = newest.replace(minute=0) + timedelta(hours=1)
        assert later and min(later) >= next_hour - timedelta(minutes=40) and max(later) >= next_hour, (newest, later)
    finally:
        down = make("kafka-down", user, f"KAFKA_HOME={home}").stdout
    assert "the local Kafka broker stopped" in down, down
    assert not accepts(port) and not accepts(port + 1), "make kafka-down left the broker listening"
