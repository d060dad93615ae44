"""Where a run executes, decided once per process: a JVM of the process's own, or the engine (a Spark Connect
server, millpond.driver.connect_server, named by SPARK_REMOTE). `for_run` and `for_command` choose; what differs
between the two is a method of the chosen target (the session, where a table's foreachBatch function runs, how a
query is awaited, what comes back from the server's batch worker), so the runner, the streaming writer and
`millpond check` never ask which one they have."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from millpond.driver import connect_batch, connect_server, run_guard
from millpond.driver.connect_server import EngineError
from millpond.driver.session import build_spark_session, hold_until_released, session_in_callers_place

if TYPE_CHECKING:
    from millpond.driver.progress import ProgressListener
    from millpond.driver.sinks.base import BatchSink
    from millpond.runs.run_record import TableResult
    from millpond.spec import Pipeline

BatchFunction = Callable[[DataFrame, int], None]


class OwnJvm:
    """A JVM this process starts, or joins under spark-submit: a table's sink runs here, in the driver."""

    def __init__(self, master: str | None = None):
        self.master = master

    def __str__(self) -> str:
        return "a JVM of its own"

    @property
    def launching(self) -> bool:
        """Whether this process starts its JVM now (a second run in one process, or spark-submit's, joins one)."""
        return SparkContext._active_spark_context is None

    def run_session(self, pipeline: Pipeline, run_id: str, driver_java_options: str) -> SparkSession:
        return build_spark_session(
            f"millpond:{pipeline.name}", pipeline.shuffle_partitions, self.master, driver_java_options
        )

    @contextmanager
    def command_session(self, app_name: str, pipeline: Pipeline) -> Iterator[SparkSession]:
        yield build_spark_session(app_name, pipeline.shuffle_partitions, self.master)

    def batch_function(self, sink: BatchSink, table_id: str) -> BatchFunction:
        return sink

    def await_query(self, query: StreamingQuery) -> None:
        query.awaitTermination()

    def collect(self, result: TableResult, listener: ProgressListener, table_id: str) -> None:
        """Nothing: the sink counted into `result` in this process."""


class OnEngine:
    """The engine at `remote`: a Connect session of the run's own; a table's sink runs in a Python worker of the
    server (millpond.driver.connect_batch), guarded by the run's holding of the pipeline lock, and reports back."""

    launching = False  # the engine's JVM is up already

    def __init__(self, remote: str):
        self.remote = remote
        self.guard: run_guard.RunGuard | None = None

    def __str__(self) -> str:
        return f"the engine at {self.remote.split(';')[0]}"

    def run_session(self, pipeline: Pipeline, run_id: str, driver_java_options: str) -> SparkSession:
        """The run's session, released before the pipeline lock is freed (session.release_engine_session). Called
        while holding the lock: the guard carries that holding, and its batches report in a folder of its own.
        Raises EngineError when the engine runs other code than this run, or does not answer."""
        self.guard = run_guard.guard_for(pipeline.name, run_id)
        spark, give_back = session_in_callers_place(self.remote, pipeline.shuffle_partitions, pipeline)
        print(f"millpond: on {self}, session {getattr(spark, 'session_id', '?')}", flush=True)
        hold_until_released(spark, give_back, connect_batch.reports_folder(self.guard.token))
        return spark

    @contextmanager
    def command_session(self, app_name: str, pipeline: Pipeline) -> Iterator[SparkSession]:
        """A Connect session of the command's own (stale code refused as a run's), stopped at the end and the
        caller's Connect session given back."""
        spark, give_back = session_in_callers_place(self.remote, pipeline.shuffle_partitions, pipeline)
        try:
            yield spark
        finally:
            spark.stop()
            give_back()

    def batch_function(self, sink: BatchSink, table_id: str) -> BatchFunction:
        return connect_batch.ServerSideBatch(sink, self._guard(), connect_batch.report_path(self._guard(), table_id))

    def await_query(self, query: StreamingQuery) -> None:
        """In short waits: a SIGTERM reaches the run between them (it then releases its session, which stops the
        query on the server)."""
        while not query.awaitTermination(2):
            pass

    def collect(self, result: TableResult, listener: ProgressListener, table_id: str) -> None:
        """What the server-side sink counted, folded into the table's result."""
        connect_batch.fold_report(result, listener, connect_batch.report_path(self._guard(), table_id))

    def _guard(self) -> run_guard.RunGuard:
        if self.guard is None:
            raise RuntimeError("run_session first: a batch on the engine is guarded by the run's holding of the lock")
        return self.guard


Target = OwnJvm | OnEngine


def for_run(master: str | None = None) -> Target:
    """The engine when SPARK_REMOTE names one (a run's `--master` is then unused), else a JVM of the run's own."""
    remote = connect_server.remote()
    return OnEngine(remote) if remote else OwnJvm(master)


def for_command(master: str | None = None) -> Target:
    """As for_run, for a command that reads the lake but is not a run (`millpond check`): `--master` with an engine
    named is refused (EngineError), since it asks for a JVM of the command's own."""
    remote = connect_server.remote()
    if remote and master is not None:
        raise EngineError(
            f"--master {master} asks for a JVM of this command's own, but SPARK_REMOTE names an engine; "
            "unset SPARK_REMOTE to use --master, or leave --master out to run on the engine"
        )
    return OnEngine(remote) if remote else OwnJvm(master)
