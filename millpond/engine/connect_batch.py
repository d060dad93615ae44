"""What a run on the engine (Spark Connect, millpond.engine.connect_server) does differently from a run in a JVM of
its own: its `foreachBatch` sinks run in a Python worker of the server, not in the run's process.

- **Settings.** The worker has the server's environment: the run's `MILLPOND_*` settings (lake, project, speed-ups,
  fault points) travel with the batch function and are set in the worker (one worker per query, so no other run
  sees them).
- **What the batch reports.** A sink's counters, errors and gate results are Python state the worker mutates and
  the run never sees; after every batch the worker writes them to `_system/engine_runs/<token>/<table>.json`,
  and the run folds that file into the table's result once the query ends.
- **Who writes.** The run holds the pipeline lock (millpond.lake.lock), but the batches commit on the server. A
  run killed mid-batch (SIGKILL included: the kernel frees its lock) must not leave its query committing: before
  every commit the worker checks that the lock is still held by its run's holding (`check_writer`: the token the
  lock file carries, new with each taking, so an Airflow retry with the same run id is another holder), and a
  batch whose run is gone fails before writing. Spark then stops the query; the next run replays the batch from
  the checkpoint. The batch holds the commit lock from its first check to its end, and a new holder of the
  pipeline lock waits for it, so a commit that passed its check never lands beside the next run's.
- **On an object-store lake** the run holds the pipeline's lease in the bucket (millpond.lake.lease), not a
  `flock`: before every commit the worker reads the lease and commits only if it still carries the run's generation
  and holder (run id, process, the taking's id) and was renewed less than half its time ago (a live run renews it
  every third). A killed run stops renewing, so its batches stop within half the lease's time; a batch that passed
  its check has the other half, less a second (store clocks count whole seconds), for its whole write before anyone
  could take the lease over. The commit lock is then a file in the engine's own local folder
  (millpond.lake.paths.engine_dir, found by the worker, not sent by the run), and the batches report in the bucket.
- **Faults.** A fault point (millpond.engine.faults) reached in the worker kills the run's process, the one
  holding the lock, as a crash of the run would; the batch then goes on and must stop at its next commit.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from millpond import settings
from millpond.lake import lease, paths
from millpond.lake.lock import flock_within, holder_token
from millpond.lake.object_store import S3Path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from millpond.engine.progress import ProgressListener
    from millpond.engine.sinks.base import BatchSink
    from millpond.lake.paths import LakePath
    from millpond.runs.run_record import TableResult

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


def server_guard() -> RunGuard | None:
    """The run guard when this process is an engine's batch worker (faults then kill the run, not the worker)."""
    return _guard


def is_remote(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def reports_folder(token: str) -> LakePath:
    """Where one holding of the pipeline lock's batches report: a retry of the same run id has a folder of its own,
    so it never reads what a killed try's batches wrote."""
    return paths.system_path("engine_runs") / token


def report_path(guard: RunGuard, table_id: str) -> LakePath:
    return reports_folder(guard.token) / f"{table_id}.json"


class RowsRead:
    """What a landing sink tells the run's ProgressListener (its batches' true row counts), carried in the report."""

    def __init__(self) -> None:
        self.rows_read: dict[tuple[str, int], int] = {}


class ServerSideBatch:
    """The foreachBatch function of a run on the engine: the table's sink, with the run's settings, its guard, and
    a report of what the sink counted written after every batch (the run reads it: fold_report)."""

    def __init__(self, sink: BatchSink, guard: RunGuard, report: LakePath):
        if hasattr(sink, "listener"):  # the run's listener stays in the run (locks, events); the count comes back
            sink = copy.copy(sink)
            sink.listener = RowsRead()
        self.sink, self.guard, self.report = sink, guard, str(report)
        self.output: list[str] = []
        self.env = {
            **settings.in_environment(),
            settings.LAKE.name: str(paths.lake_root()),
            settings.PROJECT.name: str(settings.project_root()),
        }

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        global _guard
        for name in [n for n in os.environ if n.startswith("MILLPOND_") and n not in self.env]:
            del os.environ[name]  # the engine's own settings (a fault point, a speed-up) are not the run's
        os.environ.update(self.env)
        _guard = self.guard
        output = (
            io.StringIO()
        )  # what the sink prints (the gate's summary) belongs in the run's output, not the engine's log
        try:
            with contextlib.redirect_stdout(output):
                self.guard.check()
                self.sink(batch, batch_id)
        finally:
            self.output.extend(output.getvalue().splitlines())
            self.write_report()
            self.guard.release()

    def write_report(self) -> None:
        result = self.sink.result
        listener = getattr(self.sink, "listener", None)
        report = {
            "micro_batches": result.micro_batches,
            "rows_in": result.rows_in,
            "rows_written": result.rows_written,
            "error": result.error,
            "gate": result.gate,
            "rows_read": [[t, b, n] for (t, b), n in (listener.rows_read.items() if listener else [])],
            "output": self.output,
        }
        path = paths.as_lake_path(self.report)
        if isinstance(path, S3Path):  # one PUT: whole or not at all
            path.write_text(json.dumps(report, default=str))
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(report, default=str))
        tmp.replace(path)


def fold_report(result: TableResult, listener: ProgressListener, report: LakePath) -> None:
    """Fold what the server-side sink counted into the table's result (nothing if no batch ran)."""
    try:
        data: dict[str, Any] = json.loads(report.read_text())
    except (OSError, ValueError):
        return
    result.micro_batches = data["micro_batches"]
    result.rows_in = data["rows_in"]
    result.rows_written = data["rows_written"]
    result.error = data["error"] or result.error
    result.gate = data["gate"] or result.gate
    for table_id, batch_id, rows in data["rows_read"]:
        listener.rows_read[(table_id, batch_id)] = rows
    for line in data.get("output", []):
        print(line, flush=True)


def guard_for(pipeline: str, run_id: str) -> RunGuard:
    """The guard of this process's holding of the pipeline lock (called while holding it)."""
    holding = holder_token(pipeline)
    if holding is None:
        raise RuntimeError(f"the pipeline lock of {pipeline!r} holds no token: take it first (millpond.lake.lock)")
    held = lease.held(pipeline)
    if held is not None and held.generation is not None:  # the worker finds its commit lock in the engine's folder
        return RunGuard("", "", holding, run_id, os.getpid(), held.url, held.generation, pipeline, held.holding)
    return RunGuard(str(paths.lock_path(pipeline)), str(paths.commit_lock_path(pipeline)), holding, run_id, os.getpid())
