"""`millpond preview`'s checks that stop it before any JVM starts (on real Spark: tests/integration/pipelines/)."""

from __future__ import annotations

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from millpond.driver import preview
from millpond.spec import load_pipeline
from tests.integration.kafka.test_kafka import spec

pytestmark = pytest.mark.unit

CONTACTS = "silver.customer_contacts"  # pipelines/customers.yaml: silver.customers' change feed applied


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


def test_preview_of_a_change_feed_reader_before_the_feed_is_on_says_how_to_turn_it_on(tmp_path, monkeypatch, capsys):
    """Delta shows no changes of versions written before the feed was on: the reader's first run turns it on."""
    lake = tmp_path / "lake"
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    upstream = str(lake / "silver" / "customers")
    write_deltalake(upstream, pa.table({"id": pa.array([1], pa.int64())}))
    assert preview.main(["customers", "silver.customer_contacts"]) == 1
    err = capsys.readouterr().err
    assert "silver.customer_contacts reads silver.customers's change data feed, which is not on yet" in err
    assert "Fix: millpond run customers --tables silver.customer_contacts" in err
    DeltaTable(upstream).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    assert preview.missing_input(load_pipeline("customers"), load_pipeline("customers").tables[CONTACTS]) is None
