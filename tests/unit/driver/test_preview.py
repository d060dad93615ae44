"""`millpond preview`'s checks that stop it before any JVM starts (on real Spark: tests/integration/pipelines/)."""

from __future__ import annotations

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from millpond.driver import preview, runner, sources
from millpond.lake.delta_log import latest_version
from millpond.spec import load_pipeline
from tests.integration.kafka.test_kafka import spec
from tests.support.cdc_reference import delta_source_spec

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


def test_another_job_s_delta_table_is_waited_for_then_its_feed_checked_and_never_turned_on(tmp_path, monkeypatch):
    """Before the other job writes its table, a run waits for it and preview says so; with its feed off, preview
    and the run name the owner's ALTER and millpond alters nothing (no JVM: the check reads the Delta log)."""
    lake = tmp_path / "lake"
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    pipeline = load_pipeline(delta_source_spec(tmp_path, cdc={"change_feed": True, "keys": ["id"]}), lake_root=lake)
    mirror = pipeline.tables["silver.crm_mirror"]
    location = lake / "crm" / "customers"
    assert runner.nothing_to_read(pipeline, mirror) == f"delta.crm has no Delta table at {location} yet"
    assert "holds no Delta table yet. Fix: write it there first" in preview.missing_input(pipeline, mirror)

    write_deltalake(str(location), pa.table({"id": pa.array([1], pa.int64())}))
    assert runner.nothing_to_read(pipeline, mirror) is None
    assert "change data feed, which is off at" in preview.missing_input(pipeline, mirror)
    with pytest.raises(sources.ChangeFeedOff, match=r"Fix: its owner runs ALTER TABLE delta.`.*` SET TBLPROPERTIES"):
        sources.enable_change_feed_upstream(None, pipeline, mirror)  # no Spark call happens before the refusal
    assert latest_version(location) == 0

    DeltaTable(str(location)).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    assert preview.missing_input(pipeline, mirror) is None
    sources.enable_change_feed_upstream(None, pipeline, mirror)  # on: nothing to do, nothing asked of Spark
