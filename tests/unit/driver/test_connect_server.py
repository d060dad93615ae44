"""The engine's state file and command (millpond.driver.connect_server): the state holds the token, so only its
owner may read it, never through a link another user planted, and it names its machine, since a lake on a shared
folder is seen by several; the command closes Spark's own ports without putting a secret where `ps` shows it."""

from __future__ import annotations

import json
import os
import secrets
import socket

import pytest

from millpond.driver import connect_server

pytestmark = pytest.mark.unit


def test_a_state_file_others_may_read_is_not_trusted(tmp_path):
    folder = tmp_path / "_system" / "engine"
    folder.mkdir(parents=True)
    (folder / "engine.json").write_text("{}")
    os.chmod(folder / "engine.json", 0o644)
    with pytest.raises(connect_server.EngineError, match="not trusted"):
        connect_server.read_state(tmp_path)


def write_state(folder, **changes) -> None:
    """A state file as `millpond engine start` writes it (0600 in a 0700 folder), with `changes`."""
    state = {
        "pid": 4242,
        "port": 15002,
        "host": "127.0.0.1",
        "token": "t",
        "fingerprint": "f",
        "parts": {},
        "started_at": "2026-01-01T00:00:00+00:00",
        "log": "-",
        "machine": socket.gethostname(),
        **changes,
    }
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(folder / "engine.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle)


def test_a_symlinked_state_file_is_refused_not_followed(tmp_path):
    elsewhere = tmp_path / "planted"
    write_state(elsewhere)  # a well-formed state of this user: only the link is wrong
    folder = tmp_path / "_system" / "engine"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "engine.json").symlink_to(elsewhere / "engine.json")
    with pytest.raises(connect_server.EngineError, match="is a symlink: not followed.*Fix: remove it"):
        connect_server.read_state(tmp_path)


def test_a_symlinked_engine_folder_is_refused(tmp_path):
    write_state(tmp_path / "planted")
    (tmp_path / "_system").mkdir()
    (tmp_path / "_system" / "engine").symlink_to(tmp_path / "planted")
    with pytest.raises(connect_server.EngineError, match="folder .* is a symlink: not followed"):
        connect_server.read_state(tmp_path)


def test_a_state_another_machine_wrote_is_not_taken_for_this_machines_engine(tmp_path):
    write_state(tmp_path / "_system" / "engine", machine="host-b")  # a lake on a folder two hosts mount
    with pytest.raises(connect_server.EngineError, match="engine of machine 'host-b' .* not of this one"):
        connect_server.read_state(tmp_path)
    write_state(tmp_path / "_system" / "engine")  # this machine's own
    state = connect_server.read_state(tmp_path)
    assert state is not None and (state.pid, state.machine) == (4242, socket.gethostname())


def test_the_engine_closes_sparks_own_ports_and_ui_with_no_secret_on_its_command_line(monkeypatch):
    monkeypatch.setenv("MILLPOND_SPARK_UI", "true")
    token = secrets.token_urlsafe(16)  # as start() makes one
    command = connect_server.server_command("local[2]", "127.0.0.1", 15002, "f", {}, token=True)
    confs = dict(arg.split("=", 1) for arg in command if "=" in arg and arg.startswith("spark."))
    assert confs["spark.authenticate"] == "true" and confs["spark.network.crypto.enabled"] == "true"
    assert confs["spark.network.crypto.saslFallback"] == "false"
    assert confs["spark.ui.enabled"] == "false"  # Spark's UI has no authentication
    assert not [arg for arg in command if "secret" in arg.lower() or token in arg]  # Spark makes it in the JVM
    assert connect_server.server_environment(token)[connect_server.AUTH_ENV] == token  # the token: environment only
    private = connect_server.server_command("local[2]", "0.0.0.0", 15002, "f", {}, token=False)
    assert "spark.ui.enabled=true" in private and not [a for a in private if a.startswith("spark.authenticate")]
