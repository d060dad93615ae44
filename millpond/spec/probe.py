"""Whether a Kafka broker is there, asked the cheapest way (a TCP connection) before Spark starts.

Spark's Kafka client would retry for minutes and then fail with a timeout that names no setting.
"""

from __future__ import annotations

import socket


def accepts_connection(server: str, timeout: float = 3.0) -> bool:
    """Whether host:port accepts a TCP connection (the cheapest sign a broker is there)."""
    host, _, port = server.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False
