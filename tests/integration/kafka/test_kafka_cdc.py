"""A Debezium-style change feed that arrives through Kafka (the usual way out of a database), applied as SCD 1 and
SCD 2 tables: the shipped `customers` pipeline with its landing folder swapped for a topic, on a real broker.

The envelopes are what `millpond generate customers` writes (out of log order, some a file late, some twice), sent
spread over three partitions by key hash, so the order the stream reads them in is Kafka's, not the log's; one in
seven of the first round's is sent a round late, after later changes of their keys were applied. The
reference is the plain-Python fold of every envelope sent (tests/support/cdc_reference.py). Cost: two rounds of
sends and in-process runs on the test worker's session, about 50 s beside the worker's broker.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from millpond.dev.kafka_broker import produce
from millpond.dev.sample_data import customer_change_files
from millpond.driver import runner
from millpond.lake import paths
from tests.support.cdc_reference import ENVELOPES, assert_the_example_follows

pytestmark = pytest.mark.integration

PARTITIONS = 3
EXAMPLE = Path(__file__).parents[3] / "pipelines" / "customers.yaml"


def kafka_spec(topic: str) -> dict:
    """The example pipeline reading its envelopes from a topic; its tables as shipped (the change-feed reader of
    silver.customers aside: test_cdc.py runs it)."""
    spec = yaml.safe_load(EXAMPLE.read_text())
    landing = spec["sources"]["customer_changes"]
    spec["sources"]["customer_changes"] = {
        "format": "kafka",
        "bootstrap_servers": "${MILLPOND_KAFKA_BOOTSTRAP}",
        "subscribe": [topic],
        "schema": landing["schema"],
    }
    spec["tables"]["bronze.customer_changes"]["from"] = "kafka.customer_changes"
    del spec["tables"]["silver.customer_contacts"]
    return spec


def test_a_debezium_feed_through_kafka_in_any_partition_order_equals_the_fold_of_what_was_sent(
    spark, kafka_broker, lake, tmp_path, monkeypatch
):
    topic = f"customer-changes-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, PARTITIONS)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "customers.yaml").write_text(yaml.safe_dump(kafka_spec(topic), sort_keys=False))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))
    monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", kafka_broker.bootstrap)
    generated = tmp_path / "generated"
    sent: list[dict] = []
    late: list[str] = []
    for seed in (1, 2):
        files = customer_change_files(generated, files=2, rows=120, duplicates=0.05, seed=seed)
        lines = late + [line for f in files for line in f.read_text().splitlines() if line]
        late = lines[3::7] if seed == 1 else []  # a run late: older than what the next round brings of their keys
        lines = [line for line in lines if line not in late]
        messages = [(None, str(ENVELOPES.key(json.loads(line))).encode(), line.encode()) for line in lines]
        produce(spark, kafka_broker.bootstrap, topic, messages)  # by key hash over the partitions
        sent += [json.loads(line) for line in lines]
        assert runner.main(["customers"]) == 0

        assert_the_example_follows(spark, sent)
    bronze = spark.read.format("delta").load(str(paths.table_path("bronze.customer_changes")))
    assert bronze.count() == len(sent)  # every delivery kept, duplicates too
    assert bronze.select("_kafka_partition").distinct().count() == PARTITIONS
