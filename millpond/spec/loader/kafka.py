"""The Kafka settings a source and a sink both give: where the brokers are, and Kafka client options."""

from __future__ import annotations

from typing import Any

from millpond.spec.loader.fields import SpecCheck
from millpond.spec.syntax import ENV_REF, HOST_PORT

# Kafka client settings a spec sets through its own fields (or that Spark's Kafka source and sink refuse).
_MANAGED_KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "set bootstrap_servers instead",
    "kafka.auto.offset.reset": "set starting_offsets instead",
    "kafka.enable.auto.commit": "remove it: offsets live in the checkpoint, never in Kafka",
    "kafka.key.deserializer": "remove it: keys and values are read as bytes",
    "kafka.value.deserializer": "remove it: keys and values are read as bytes",
    "kafka.key.serializer": "remove it: set the sink's key expression",
    "kafka.value.serializer": "remove it: set the sink's value expression",
    "kafka.interceptor.classes": "remove it (Spark refuses consumer interceptors)",
}


def bootstrap_servers(check: SpecCheck, where: str, raw: Any) -> str:
    """`host:port[,host:port]`, or `${NAME}`: the value of an environment variable when the run starts."""
    text = str(raw or "").strip()
    if raw is None or ENV_REF.match(text):
        return text
    if not all(HOST_PORT.match(server.strip()) for server in text.split(",")):
        check.problem(
            where,
            f"{raw!r} is neither host:port[,host:port...] nor ${{ENV_VAR}}",
            "write e.g. ${MILLPOND_KAFKA_BOOTSTRAP} (quoted inside {...}), read when the run starts, or "
            "broker1:9092,broker2:9092",
        )
    return text


def kafka_options(check: SpecCheck, where: str, raw: Any) -> dict[str, str]:
    """Kafka client settings (security, timeouts): each `kafka.<setting>`; what the spec manages is refused."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        check.problem(
            where,
            "expected a mapping of Kafka client settings",
            "e.g. options: {kafka.security.protocol: SASL_SSL}",
        )
        return {}
    for key in raw:
        if str(key) in _MANAGED_KAFKA_OPTIONS:
            check.problem(f"{where}.{key}", "millpond sets this itself", _MANAGED_KAFKA_OPTIONS[str(key)])
        elif not str(key).startswith("kafka."):
            check.problem(
                f"{where}.{key}",
                "not a Kafka client setting",
                f"prefix Kafka client settings with 'kafka.' (kafka.{key}); topics, offsets and rate "
                "limits have their own fields",
            )
    return {str(k): str(v) for k, v in raw.items()}
