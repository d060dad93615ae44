"""One writer per pipeline: an OS file lock under the lake's `_system/locks/`.

The stale-lock rule is the kernel's: `flock` is released when its holder dies for any reason (SIGKILL
included), so a crashed run never blocks the next one. The file's text says who holds it, and a token new with
each taking: a batch of a run on the engine (millpond.driver.connect_batch) commits only while the lock holds its
run's token. Such a batch commits under the pipeline's commit lock, so a run that takes the pipeline lock first
waits for a batch of a dead holder that is still committing (`_wait_for_commits`): two writers never overlap.

A lake on object storage has no shared filesystem to lock: there `pipeline_lock` holds the pipeline's lease in the
bucket instead (lease.py) and yields it, so the writer can `check()` it before each commit. An engine's batches on
such a lake commit under a commit lock in the engine's local folder (paths.engine_dir); a run on that machine waits
for it after taking the lease, as on a folder lake.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from millpond import settings
from millpond.lake import paths
from millpond.lake.lease import PipelineLease, held, pipeline_lease
from millpond.lake.lock_errors import LakeNotWritable, PipelineBusy
from millpond.lake.object_store import is_object_store


@contextmanager
def pipeline_lock(pipeline: str, run_id: str, wait_seconds: float = 0.0) -> Iterator[PipelineLease | None]:
    """Hold the pipeline's lock for the block: a `flock` on a local lake (yields None), the lease on an object-store
    lake (yields it)."""
    lake = settings.LAKE.raw() or ""
    if is_object_store(lake):
        with pipeline_lease(lake, pipeline, run_id, wait_seconds) as lease:
            if paths.commit_lock_path(pipeline).parent.is_dir():  # an engine of this machine served the lake
                _wait_for_commits(pipeline, max(wait_seconds, COMMIT_WAIT_SECONDS))
            yield lease
        return
    path = paths.on_disk(paths.lock_path(pipeline), "a flock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held for the whole run
    except OSError as exc:
        raise LakeNotWritable(
            f"cannot create the pipeline lock {path}: {exc}. Fix: make the lake writable "
            "(and give it free space) for the user running millpond"
        ) from None
    try:
        if not flock_within(handle, wait_seconds, poll_seconds=0.5):
            raise PipelineBusy(
                f"pipeline {pipeline!r} is already running ({holder(path)}); one writer at a time. "
                f"Fix: wait for it to finish, or pass --wait SECONDS to queue behind it"
            )
        handle.seek(0)
        handle.truncate()
        handle.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "run_id": run_id,
                    "token": uuid.uuid4().hex,
                    "since": datetime.now(UTC).isoformat(),
                }
            )
        )
        handle.flush()
        _wait_for_commits(pipeline, max(wait_seconds, COMMIT_WAIT_SECONDS))
        yield None
    finally:
        handle.close()  # releases the lock


COMMIT_WAIT_SECONDS = 600.0  # a batch of a dead run on the engine finishing its commit


def _wait_for_commits(pipeline: str, wait_seconds: float) -> None:
    """Take and release the commit lock once: a batch of a previous holder still committing on the engine (its run
    died mid-batch) finishes first; every later batch of it finds the token changed and commits nothing."""
    path = paths.commit_lock_path(pipeline)
    with open(path, "a+") as handle:  # released as the file closes
        if not flock_within(handle, wait_seconds, poll_seconds=0.2):
            raise PipelineBusy(
                f"pipeline {pipeline!r}: a batch of a previous run is still committing on the engine after "
                f"{wait_seconds:.0f} s ({path}). Fix: `millpond engine status`; stop the engine if it hangs"
            )


def flock_within(handle: IO[str], seconds: float, poll_seconds: float) -> bool:
    """Take an exclusive `flock` on the open file, trying until `seconds` have passed; False if it stayed taken."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_seconds)


def holder_token(pipeline: str) -> str | None:
    """The token of the pipeline lock's current holding (None when no run ever took it). On an object-store lake,
    that of the lease this process holds: the pipeline, the lease's generation and an id new with each taking."""
    if is_object_store(settings.LAKE.raw() or ""):
        lease = held(pipeline)
        if lease is None or lease.generation is None:
            return None
        return f"{pipeline}.g{lease.generation}.{lease.holding}"
    try:
        return json.loads(paths.lock_path(pipeline).read_text() or "{}").get("token")
    except (OSError, ValueError):
        return None


def holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "holder unknown"
    return f"run {info.get('run_id')} pid {info.get('pid')} on {info.get('host')} since {info.get('since')}"
