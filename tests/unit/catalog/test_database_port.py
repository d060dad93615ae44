"""The catalog server's port check: taken while something listens there, free again as soon as it stops, even while
the connections it closed linger in TIME_WAIT (`make down` then `make up` within a minute restarts on its port)."""

from __future__ import annotations

import socket

import pytest

from millpond.catalog import database

pytestmark = pytest.mark.unit


def test_a_port_is_taken_while_listened_on_and_free_once_the_listener_and_its_connections_closed():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL's own listener
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    assert not database._free(port)
    accepted.close()  # the server side closes first, as a stopping server does: its end waits in TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    with socket.socket() as plain:  # what the check did before: a plain bind, refused while TIME_WAIT lasts
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert database._free(port)
