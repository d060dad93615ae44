"""`millpond preview`'s checks that stop it before any JVM starts (on real Spark: tests/integration/pipelines/)."""

from __future__ import annotations

import pytest
import yaml

from millpond.driver import preview
from tests.integration.kafka.test_kafka import spec

pytestmark = pytest.mark.unit


def test_preview_of_a_kafka_table_without_its_broker_address_stops_before_spark(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "devices.yaml").write_text(yaml.safe_dump(spec("events", "alerts")))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    monkeypatch.delenv("MILLPOND_KAFKA_BOOTSTRAP", raising=False)
    assert preview.main(["devices", "bronze.events"]) == 2
    err = capsys.readouterr().err
    assert "sources.events.bootstrap_servers: environment variable MILLPOND_KAFKA_BOOTSTRAP is not set" in err
    assert "Fix: export MILLPOND_KAFKA_BOOTSTRAP=" in err
