"""What a run on the engine (Spark Connect, millpond.driver.connect_server) does differently from a run in a JVM of
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
- **Faults.** A fault point (millpond.driver.faults) reached in the worker kills the run's process, the one
  holding the lock, as a crash of the run would; the batch then goes on and must stop at its next commit.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from typing import TYPE_CHECKING, Any

from millpond import process_env, settings
from millpond.driver import run_guard
from millpond.driver.run_guard import RunGuard
from millpond.lake import paths, storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from millpond.driver.progress import ProgressListener
    from millpond.driver.sinks.base import BatchSink
    from millpond.lake.paths import LakePath
    from millpond.runs.run_record import TableResult


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
        # The run's settings whole: the engine's own (a fault point, a speed-up) and a previous run's are not this one's.
        process_env.replace_with_prefix("MILLPOND_", self.env)
        run_guard.serve(self.guard)
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
        storage.write_whole(paths.as_lake_path(self.report), json.dumps(report, default=str))


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
