"""The engine's state file (millpond.engine.connect_server): it holds the token, so only its owner may read it."""

from __future__ import annotations

import os

import pytest

from millpond.engine import connect_server

pytestmark = pytest.mark.unit


def test_a_state_file_others_may_read_is_not_trusted(tmp_path):
    folder = tmp_path / "_system" / "engine"
    folder.mkdir(parents=True)
    (folder / "engine.json").write_text("{}")
    os.chmod(folder / "engine.json", 0o644)
    with pytest.raises(connect_server.EngineError, match="not trusted"):
        connect_server.read_state(tmp_path)
