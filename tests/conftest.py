"""Shared fixtures: one session-scoped local Spark (Delta, UI off, 2 shuffle partitions), a lake per test, and one
session-scoped Kafka broker for the tests that ask for it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["TZ"] = "UTC"
# py4j logs "Closing down clientserver connection" at exit, after pytest closed its capture streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def spark():
    from millpond.engine.session import build_spark_session

    session = build_spark_session("millpond-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "lake"
    root.mkdir()
    monkeypatch.setenv("MILLPOND_LAKE", str(root))
    return root


@pytest.fixture(scope="session")
def kafka_broker():
    """A real Kafka broker (KRaft) for the session; a broker that cannot start fails the test, naming the fix."""
    from millpond.dev.kafka_broker import KafkaBroker

    broker = KafkaBroker().start()
    yield broker
    broker.stop()
