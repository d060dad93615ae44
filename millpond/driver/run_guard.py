"""Who may commit: the check a sink makes just before every commit (`check_writer`), and on the engine the run guard
that stops a batch whose run is gone. Why a batch on the engine needs one: millpond.driver.connect_batch."""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from millpond.lake import lease, paths
from millpond.lake.lock import flock_within, holder_token

GONE_WAIT_SECONDS = 30.0


class WriterGone(RuntimeError):
    """The run this batch belongs to no longer holds its pipeline's lock: the batch must not commit."""


COMMIT_LOCK_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class RunGuard:
    """The run a server-side batch belongs to: its pipeline lock and the token of the run's holding of it (new with
    each taking, so a retry of the same run id is another holder), its run id and process."""

    lock_path: str  # "" on an object-store lake, where the run holds a lease instead
    commit_lock_path: str  # "" on an object-store lake: the worker's own (`_hold_commit_lock`)
    token: str
    run_id: str
    client_pid: int
    lease_url: str = ""  # an object-store lake: the run's lease and its generation
    generation: int = 0
    pipeline: str = ""
    holding: str = ""  # the run's taking of its lease (millpond.lake.lease.PipelineLease.holding)

    def check(self) -> None:
        """Return if the run still holds the lock, else raise WriterGone. From the first check of a batch to its
        end the batch holds the pipeline's commit lock (`release` ends it), so a run taking the pipeline lock after
        this run's death waits for the batch (millpond.lake.lock) instead of writing beside it.

        The lock is a `flock` the run's process holds: its file names the holding's token; if the lock can be taken
        here, nobody holds it (the run died). On an object-store lake: `_check_lease`."""
        self._hold_commit_lock()
        if self.lease_url:
            self._check_lease()
            return
        try:
            info = json.loads(Path(self.lock_path).read_text() or "{}")
        except (OSError, ValueError):
            info = {}
        if info.get("token") != self.token:
            raise WriterGone(
                f"run {self.run_id} no longer holds the pipeline lock {self.lock_path} (run {info.get('run_id')} "
                "does): its batch is not committed"
            )
        with open(self.lock_path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # held, and by this run's holding
            fcntl.flock(handle, fcntl.LOCK_UN)
        raise WriterGone(
            f"run {self.run_id} is gone (its pipeline lock {self.lock_path} is free): its batch is not committed; "
            "the next run replays it"
        )

    def _check_lease(self) -> None:
        """The run's lease is held by this run's taking of it, and the run renewed it less than half its time ago."""
        seen = lease.observe(self.lease_url)
        record = seen.record if seen is not None else None
        if seen is None or record is None or not self._holds(record):
            holder = f"{record.state} by {record.holder()}, generation {record.generation}" if record else "gone"
            raise WriterGone(
                f"run {self.run_id} no longer holds its lease {self.lease_url} (generation {self.generation}; it is "
                f"{holder}): its batch is not committed"
            )
        if seen.age_seconds >= record.ttl_seconds / 2:
            raise WriterGone(
                f"run {self.run_id} has not renewed its lease {self.lease_url} for {seen.age_seconds:.0f} s (a live "
                f"run renews it every {record.ttl_seconds / 3:.0f} s): it is gone or cut off from the store, so its "
                "batch is not committed; the next run replays it"
            )

    def _holds(self, record: lease.LeaseRecord) -> bool:
        """The record is this run's holding: its generation and every mark of its holder (run id, process, and the
        taking's id when the guard knows it). A generation alone is a number anyone may write again: a lease object
        deleted and taken anew counts from 1, and a record forged with the run's generation names another holder."""
        same_taking = not self.holding or record.holding == self.holding
        return (
            record.state == lease.HELD
            and record.generation == self.generation
            and record.run_id == self.run_id
            and record.pid == self.client_pid
            and same_taking
        )

    def _hold_commit_lock(self) -> None:
        global _commit_lock
        if _commit_lock is not None:
            return
        # On object storage the engine's own folder (its user's, not the run's): the run's path is a folder lake's.
        path = paths.commit_lock_path(self.pipeline) if self.lease_url else Path(self.commit_lock_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held until release()
        if not flock_within(handle, COMMIT_LOCK_WAIT_SECONDS, poll_seconds=0.05):
            handle.close()
            raise WriterGone(
                f"run {self.run_id}: the commit lock {path} stayed taken for "
                f"{COMMIT_LOCK_WAIT_SECONDS:.0f} s: its batch is not committed"
            )
        _commit_lock = handle

    @staticmethod
    def release() -> None:
        """End of the batch: free the commit lock its checks took."""
        global _commit_lock
        if _commit_lock is not None:
            _commit_lock.close()
            _commit_lock = None

    def wait_gone(self) -> None:
        """After killing the run's process: wait until the kernel has freed its lock."""
        deadline = time.monotonic() + GONE_WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                self.check()
            except WriterGone:
                return
            time.sleep(0.05)


_guard: RunGuard | None = None  # set in a server-side worker only
_commit_lock: TextIO | None = None  # the commit lock a server-side batch holds, from its first check to its end


def check_writer() -> None:
    """Called just before every commit a sink makes: on an object-store lake the lease's `check()` (LeaseLost if
    another run took it over), on the engine the lock check; nothing else in a run's own process on a folder."""
    lease.fence()
    if _guard is not None:
        _guard.check()


def serve(guard: RunGuard) -> None:
    """This process is an engine's batch worker, running a batch of `guard`'s run (millpond.driver.connect_batch)."""
    global _guard
    _guard = guard


def server_guard() -> RunGuard | None:
    """The run guard when this process is an engine's batch worker (faults then kill the run, not the worker)."""
    return _guard


def guard_for(pipeline: str, run_id: str) -> RunGuard:
    """The guard of this process's holding of the pipeline lock (called while holding it)."""
    holding = holder_token(pipeline)
    if holding is None:
        raise RuntimeError(f"the pipeline lock of {pipeline!r} holds no token: take it first (millpond.lake.lock)")
    held = lease.held(pipeline)
    if held is not None and held.generation is not None:  # the worker finds its commit lock in the engine's folder
        return RunGuard("", "", holding, run_id, os.getpid(), held.url, held.generation, pipeline, held.holding)
    return RunGuard(str(paths.lock_path(pipeline)), str(paths.commit_lock_path(pipeline)), holding, run_id, os.getpid())
