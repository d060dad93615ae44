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
