"""The runner's checks that stop a run before any JVM starts (the runs themselves: tests/integration/pipelines/)."""

from __future__ import annotations

import pytest

from millpond.engine import runner

pytestmark = pytest.mark.unit


def test_without_a_broker_address_a_run_stops_before_spark_naming_the_variable(lake, monkeypatch, capsys):
    """`make demo` and `make up` set no Kafka address: the spec still loads, and a run says what is missing."""
    monkeypatch.delenv("MILLPOND_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    assert runner.main(["device_status"]) == 2
    err = capsys.readouterr().err
    assert "sources.device_events.bootstrap_servers: environment variable MILLPOND_KAFKA_BOOTSTRAP is not set" in err
    assert "Fix: export MILLPOND_KAFKA_BOOTSTRAP=host:port" in err
    assert not (lake / "_system").exists()  # before the lock: nothing written


@pytest.fixture
def s3a_lake(monkeypatch):
    """An s3a lake no server answers for: whatever these runs do must stop before any request."""
    monkeypatch.setenv("MILLPOND_LAKE", "s3a://no-such-bucket/lake")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-one")
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)


def test_a_run_on_the_engine_with_an_object_store_lake_says_it_needs_a_folder(s3a_lake, monkeypatch, capsys):
    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost:1/")
    assert runner.main(["activity"]) == 2
    err = capsys.readouterr().err
    assert "a run on the engine (SPARK_REMOTE) needs the lake on a local or shared folder" in err
