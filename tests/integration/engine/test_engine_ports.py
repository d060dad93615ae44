"""What another local user reaches on the engine without its secrets: every TCP port its JVM listens on.

The Connect port wants the token (test_engine.py::test_a_client_without_the_token_is_refused). Spark's own ports,
the driver's RPC and the block manager, speak Spark's transport protocol, which the token does not cover: without
`spark.authenticate` they hand an RPC to the driver's endpoints (or answer it) for anyone who connects; and Spark's
web UI has no authentication at all. The engine turns both off (millpond.driver.connect_server). These tests speak
the wire protocol by hand, as such a user would, against the test worker's engine (tests/conftest.py::engine_server:
no engine of their own, a few seconds).

A frame of Spark's transport (network-common `MessageEncoder`): an 8-byte big-endian frame length counting itself,
a 1-byte message type, then the message; an RpcRequest (type 3) is a request id (8 bytes), the body's length (4) and
the body.

Not covered, Spark's gap (docs/engine.md): Spark 4.2's transport answers a StreamRequest (the driver's file server)
before authentication, so the public jars the application ships can be fetched by name.
"""

from __future__ import annotations

import json
import socket
import struct
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

pytestmark = pytest.mark.integration

RPC_REQUEST, RPC_FAILURE = 3, 5
WAIT_SECONDS = 1.5


def spark_ports(engine_server: dict) -> list[int]:
    """Every TCP port the engine's JVM listens on but the Connect one."""
    state = json.loads((engine_server["folder"] / "engine.json").read_text())
    listening = psutil.Process(state["pid"]).net_connections(kind="tcp")
    ports = sorted({c.laddr.port for c in listening if c.status == psutil.CONN_LISTEN} - {state["port"]})
    assert ports, "the engine's JVM listens on no port but the Connect one: nothing probed"
    return ports


def frame(message_type: int, message: bytes) -> bytes:
    return struct.pack(">q", 8 + 1 + len(message)) + bytes([message_type]) + message


def rpc_request(body: bytes) -> bytes:
    return frame(RPC_REQUEST, struct.pack(">qi", 7, len(body)) + body)


def answer(port: int, payload: bytes) -> bytes:
    """What the port sends back within WAIT_SECONDS (b"" for nothing, a closed or reset connection)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECONDS) as conn:
        conn.sendall(payload)
        try:
            while chunk := conn.recv(65536):
                received += chunk
                if len(received) >= 8 and len(received) >= struct.unpack(">q", received[:8])[0]:
                    break  # one whole frame
        except (TimeoutError, ConnectionResetError):
            pass
    return received


def message_type(reply: bytes) -> int | None:
    return reply[8] if len(reply) > 8 else None


def test_spark_ports_refuse_an_rpc_and_serve_no_web_page_without_the_secret(engine_server):
    """An RPC without Spark's authentication never reaches the driver's endpoints or the block manager: it is
    answered only by the authentication handler refusing it (or not at all); and no port speaks HTTP (the UI)."""
    ports = spark_ports(engine_server)
    # All at once: a port that says nothing costs WAIT_SECONDS, and an engine that has served many runs listens on
    # many (docs/engine.md: Spark leaves a listening socket behind per foreachBatch query)
    with ThreadPoolExecutor(max_workers=32) as pool:
        pages = pool.map(answer, ports, [b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"] * len(ports))
        replies = pool.map(answer, ports, [rpc_request(b"\x00" * 16)] * len(ports))
        answered = list(zip(ports, pages, replies, strict=True))
    taken = []
    for port, page, reply in answered:
        if page.startswith(b"HTTP/"):
            taken.append(f"port {port} serves a web page to anyone: {page[:200]!r}")
        if reply and not (message_type(reply) == RPC_FAILURE and b"AuthRpcHandler" in reply):
            taken.append(f"port {port} took an RPC without the secret: {reply[:200]!r}")
    assert not taken, "\n".join(taken)
