"""`${NAME}` in a spec: a setting (a Kafka address) read from the environment when a run starts.

A spec must not hard-code where a cluster lives, and Airflow parses specs where the address may not be set, so the
loader accepts `${NAME}` as written and these functions resolve and check it at run time.
"""

from __future__ import annotations

import os

from millpond.spec.model import KafkaSource, Pipeline
from millpond.spec.probe import accepts_connection
from millpond.spec.syntax import ENV_REF, HOST_PORT


def resolve_setting(text: str) -> str:
    """A spec value with `${NAME}` replaced by the environment variable (checked by `environment_problems`)."""
    match = ENV_REF.match(text.strip())
    return os.environ.get(match.group(1), "").strip() if match else text


def environment_problems(pipeline: Pipeline, table_ids: list[str]) -> list[str]:
    """The Kafka addresses the selected tables need: `${NAME}` set and host:port, and a broker answering there;
    checked when a run starts (before Spark, before the lock).

    Not at load time: Airflow parses the spec where the broker's address may not be set, and a spec must not hard-code
    where a cluster lives.
    """
    problems = []
    for where, text in _kafka_settings(pipeline, table_ids).items():
        match = ENV_REF.match(text)
        value = resolve_setting(text)
        if match and not value:
            problems.append(
                f"{pipeline.spec_path}: {where}: environment variable {match.group(1)} is not set. Fix: "
                f"export {match.group(1)}=host:port[,host:port] where the run starts"
            )
        elif match and not all(HOST_PORT.match(server.strip()) for server in value.split(",")):
            problems.append(
                f"{pipeline.spec_path}: {where}: environment variable {match.group(1)}={value!r} is not "
                f"host:port[,host:port]. Fix: export {match.group(1)}=broker1:9092,broker2:9092"
            )
        elif value and not any(accepts_connection(server.strip()) for server in value.split(",")):
            # Spark's Kafka client would retry for minutes before failing with a timeout that names no setting.
            named = f" (from {match.group(1)})" if match else ""
            problems.append(
                f"{pipeline.spec_path}: {where}: no Kafka broker answers on {value}{named}. Fix: start "
                f"the broker (on this machine: make kafka-up) or point the setting at a running one"
            )
    return problems


def _kafka_settings(pipeline: Pipeline, table_ids: list[str]) -> dict[str, str]:
    """Each Kafka address the tables need: {spec field: its text as written (maybe `${NAME}`)}."""
    settings = []
    for table_id in table_ids:
        table = pipeline.tables[table_id]
        source = pipeline.sources.get(table.source)
        if isinstance(source, KafkaSource):
            settings.append((f"sources.{source.name}.bootstrap_servers", source.bootstrap_servers))
        if table.sink.is_kafka:
            settings.append((f"tables.{table.id}.sink.bootstrap_servers", table.sink.bootstrap_servers or ""))
    return dict(settings)


def unset_environment(pipeline: Pipeline) -> list[str]:
    """The `${NAME}` variables the pipeline's Kafka addresses name that are not set here (no network: DAG parsing)."""
    names = [
        match.group(1)
        for text in _kafka_settings(pipeline, list(pipeline.tables)).values()
        if (match := ENV_REF.match(text.strip())) and not resolve_setting(text)
    ]
    return sorted(set(names))
