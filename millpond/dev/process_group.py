"""The background servers `make kafka-up` and `make s3-up` start: each runs in a process group of its own, whose id
a file under the server's home keeps, so `make *-down` stops the server and every process it started."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def stop(pgid_file: Path, grace_seconds: float, poll_seconds: float) -> bool:
    """SIGTERM the group named in pgid_file, SIGKILL it after grace_seconds; False if none was running."""
    if not pgid_file.exists():
        return False
    pgid = int(pgid_file.read_text())
    running = alive(pgid)
    if running:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while alive(pgid) and time.monotonic() < deadline:
            time.sleep(poll_seconds)
        if alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
    pgid_file.unlink()
    return running


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
