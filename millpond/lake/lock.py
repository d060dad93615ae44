"""One writer per pipeline: an OS file lock under the lake's `_system/locks/`.

The stale-lock rule is the kernel's: `flock` is released when its holder dies for any reason (SIGKILL
included), so a crashed run never blocks the next one. The file's text only says who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from millpond.lake import paths


class PipelineBusy(RuntimeError):
    pass


class LakeNotWritable(RuntimeError):
    """The lock cannot even be created: a read-only, full or foreign-owned lake, caught before Spark starts."""


@contextmanager
def pipeline_lock(pipeline: str, run_id: str, wait_seconds: float = 0.0) -> Iterator[None]:
    path = paths.lock_path(pipeline)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held for the whole run
    except OSError as exc:
        raise LakeNotWritable(
            f"cannot create the pipeline lock {path}: {exc}. Fix: make the lake writable "
            "(and give it free space) for the user running millpond"
        ) from None
    deadline = time.monotonic() + wait_seconds
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise PipelineBusy(
                        f"pipeline {pipeline!r} is already running ({holder(path)}); one writer at a time. "
                        f"Fix: wait for it to finish, or pass --wait SECONDS to queue behind it"
                    ) from None
                time.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "run_id": run_id,
                    "since": datetime.now(UTC).isoformat(),
                }
            )
        )
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock


def holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "holder unknown"
    return f"run {info.get('run_id')} pid {info.get('pid')} on {info.get('host')} since {info.get('since')}"
