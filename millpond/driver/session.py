"""The one place a SparkSession is built: Delta and millpond's functions enabled from the local jar cache, tuned for
small local runs."""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from millpond import process_env, settings
from millpond.driver import class_archive, connect_server, jars, s3a
from millpond.driver.connect_server import CLASS_PATH, EngineError
from millpond.driver.driver_jit import QUICK_OPTIONS
from millpond.driver.spark_conf import LISTING_THRESHOLD, LOCAL_LISTING_THRESHOLD, base_conf
from millpond.lake import storage

if TYPE_CHECKING:
    from millpond.lake.paths import LakePath
    from millpond.spec import Pipeline

# Imported inside functions: Spark Connect's session class only for a session on the engine (it needs grpc, which a JVM
# of the run's own does not).


def build_spark_session(
    app_name: str,
    shuffle_partitions: int = 2,
    master: str | None = None,
    driver_java_options: str = "",
    launch_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Build (or join, under spark-submit) the application's session.

    Shuffle partitions are frozen into a stateful query's checkpoint on its first run, so they are set here,
    before any query starts. Driver JVM options (millpond.driver.driver_jit) and `launch_conf` apply only when this call
    starts the JVM.
    """
    process_env.default_for_process("SPARK_LOCAL_IP", "127.0.0.1")  # no hostname lookups or warnings on laptops/CI
    # A JVM of this process's own, even with SPARK_REMOTE set (a run or check that goes to the engine never calls
    # this: millpond.driver.targets; `millpond generate` and preview ask for a JVM): pyspark would refuse a master beside it
    # (CANNOT_CONFIGURE_SPARK_CONNECT_MASTER), so it is hidden while the session is built. Set but blank, it is
    # dropped for good (pyspark would still refuse it). Once it is back, a classic `builder.getOrCreate()` in this
    # process would be refused: no caller that sets it (preview, generate) makes one; runs with their own JVM have
    # none set.
    if not os.environ.get("SPARK_REMOTE", "x").strip():
        process_env.for_process({"SPARK_REMOTE": None})
    with process_env.scoped({"SPARK_REMOTE": None}):
        return _build_jvm_session(app_name, shuffle_partitions, master, driver_java_options, launch_conf)


def _build_jvm_session(
    app_name: str,
    shuffle_partitions: int,
    master: str | None,
    driver_java_options: str,
    launch_conf: dict[str, str] | None,
) -> SparkSession:
    if "SPARK_CONNECT_MODE_ENABLED" in os.environ and not _holds_connect_session():
        # pyspark sets it in the process that opens a Connect session, so a child of such a process (a notebook's
        # `!millpond run`, a test's subprocess) inherits it, and pyspark would then build this JVM's session as a
        # Connect one with no URL (CONNECT_URL_NOT_SET).
        process_env.for_process({"SPARK_CONNECT_MODE_ENABLED": None})
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: we launch the JVM ourselves
        master = master or settings.SPARK_MASTER.value()
        builder = builder.master(master)
        lake_launch = s3a.launch_conf(master)  # an object-store lake's s3a jars (millpond.driver.s3a); {} locally
        shipped = [*jars.spark_jars(), *filter(None, lake_launch.pop("spark.jars", "").split(","))]
        builder = builder.config("spark.jars", ",".join(shipped))
        builder = builder.config("spark.ui.enabled", settings.SPARK_UI.value())
        builder = builder.config("spark.driver.memory", settings.DRIVER_MEMORY.value())
        launch = {**lake_launch, **(launch_conf or {})}
        class_path = os.pathsep.join(
            filter(None, [lake_launch.get(CLASS_PATH, ""), (launch_conf or {}).get(CLASS_PATH, "")])
        )
        if class_path:  # both kept: the catalog's (millpond.catalog.metastore) beside an object-store lake's jars
            launch[CLASS_PATH] = class_path
        archive = class_archive.driver_options(launch.get(CLASS_PATH, ""))
        java_options = " ".join(filter(None, [driver_java_options, archive]))
        if java_options:
            builder = builder.config("spark.driver.extraJavaOptions", java_options)
        for key, value in launch.items():
            builder = builder.config(key, value)
    for key, value in {**base_conf(), **s3a.session_conf()}.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    with project_on_workers_path():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.SPARK_LOG_LEVEL.raw() or "ERROR")
    if (spark.sparkContext.master or "").startswith("local"):  # pyspark types it optional; a context has one
        spark.conf.set(LISTING_THRESHOLD, str(LOCAL_LISTING_THRESHOLD))
    return spark


def _holds_connect_session() -> bool:
    """Whether this process has opened a Spark Connect session (pyspark's private attributes, as below)."""
    connect = sys.modules.get("pyspark.sql.connect.session")
    if connect is None:
        return False
    session_class: Any = connect.SparkSession
    held = [session_class._default_session, getattr(session_class._active_session, "session", None)]
    return any(session is not None and not session.is_stopped for session in held)


def connect_session(remote: str, shuffle_partitions: int = 2, pipeline: Pipeline | None = None) -> SparkSession:
    """A new Spark Connect session on the engine (millpond.driver.connect_server): a session id of its own, so no
    conf, view or tag of another run is seen. Raises EngineError when the engine runs other code than this
    process (its fingerprint, `spark.millpond.fingerprint`, differs, or a package `pipeline`'s transforms import
    differs from the one the engine recorded): a run never runs stale code."""
    _reachable_or_refuse(remote)
    spark = SparkSession.builder.remote(remote).create()
    # The run's session becomes this process's default and active one: libraries find their session that way (GX's
    # Spark datasource, pyspark's own getOrCreate), and create() makes a session the default only when there is none,
    # so in a process already holding another Connect session (a test's, a notebook's) they would mix the two
    # (SESSION_NOT_SAME, DATAFRAME_NOT_FOUND). pyspark offers no public setter for a Connect session.
    connect_session_class: Any = type(spark)  # pyspark.sql.connect.session.SparkSession
    connect_session_class._default_session = spark
    connect_session_class._active_session.session = spark
    try:
        server = spark.conf.get(connect_server.FINGERPRINT_CONF, None)
        server_transforms = json.loads(spark.conf.get(connect_server.TRANSFORMS_CONF, None) or "{}")
        ours, parts = connect_server.code_fingerprint(pipeline)
        if pipeline is None:  # a session that runs no transform (reading tables back)
            parts = {name: value for name, value in parts.items() if name not in connect_server.transform_parts(parts)}
        if server != ours or connect_server.stale_transforms(server_transforms, parts):
            state = connect_server.read_state()
            raise EngineError(
                connect_server.stale_message(
                    server, ours, {**(state.parts if state else {}), **server_transforms}, parts
                )
            )
        if problem := s3a.engine_problem(spark.conf.get(s3a.S3A_LOG_STORE, None), remote.split(";")[0]):
            raise EngineError(problem)
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    except BaseException:
        spark.stop()  # a refused or failed session is neither left open on the server nor the process's default
        raise
    return spark


def _reachable_or_refuse(remote: str) -> None:
    """Fail at once, naming the fix, when nothing listens at SPARK_REMOTE: pyspark itself would retry an
    unavailable server for ten minutes, holding the pipeline lock all the while."""
    address = urlparse(remote.split(";")[0].replace("sc://", "http://", 1))
    try:
        socket.create_connection((address.hostname or "localhost", address.port or 15002), timeout=5).close()
    except OSError as exc:
        raise EngineError(
            f"no engine answers at SPARK_REMOTE {remote.split(';')[0]} ({exc}). Fix: `millpond engine start` and set "
            "SPARK_REMOTE to the value it prints, or unset SPARK_REMOTE to run in a JVM of the run's own"
        ) from None


_engine_release: list[Callable[[], None]] = []  # the open engine session's release, if any


def hold_until_released(spark: SparkSession, give_back: Callable[[], None], reports: LakePath) -> None:
    """Keep a run's engine session until `release_engine_session`: the runner calls it before it frees the pipeline
    lock, and SIGTERM (Airflow's on_kill) ends the run through that path, so the server stops the session's queries
    before the next run can start. A SIGKILLed run cannot release it: its batches stop at their next commit instead
    (millpond.driver.run_guard). `reports` is the folder the run's server-side batches report in (removed then)."""

    def release() -> None:
        spark.stop()
        give_back()
        storage.remove_tree(reports)  # the batches' reports

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    _engine_release.append(release)
    atexit.register(release_engine_session)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, terminate)


def session_in_callers_place(
    remote: str, shuffle_partitions: int, pipeline: Pipeline | None
) -> tuple[SparkSession, Callable[[], None]]:
    """connect_session, and what gives the caller's Connect session back once it has stopped; a refused or failed
    session gives it back at once, leaving the caller's session as it found it."""
    give_back = _callers_connect_session()
    try:
        return connect_session(remote, shuffle_partitions, pipeline), give_back
    except BaseException:
        give_back()
        raise


def _callers_connect_session() -> Callable[[], None]:
    """What makes the process's Connect session before a run (a notebook's, if any) its default and active one again,
    once the run's session, which connect_session made both, has stopped or failed (pyspark's private attributes, as
    there)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    connect_session_class: Any = ConnectSession
    default = connect_session_class._default_session
    active = getattr(connect_session_class._active_session, "session", None)

    def give_back() -> None:
        current = connect_session_class._default_session
        if current is None or current.is_stopped:
            connect_session_class._default_session = default
        current = getattr(connect_session_class._active_session, "session", None)
        if current is None or current.is_stopped:
            connect_session_class._active_session.session = active

    return give_back


def release_engine_session() -> None:
    """Stop the run's engine session (its queries stop on the server); nothing without one. Idempotent."""
    while _engine_release:
        _engine_release.pop()()


@contextmanager
def project_on_workers_path() -> Iterator[None]:
    """The project folder on the PYTHONPATH of the JVM this process launches, and so of its Python workers, which
    unpickle a transform by its module path in the project (spark-submit ships the project as py-files instead).

    Set only while the JVM starts: the JVM keeps its copy of the environment, and this process's own environment is
    left as it was, so the processes it starts later (Airflow, a second project) do not import the project's folder.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit: the JVM is already up
        yield
        return
    with process_env.scoped(
        {"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(settings.project_root())]))}
    ):
        yield


def driver_jit_in_effect(spark: SparkSession) -> str:
    """ "quick" if the driver JVM runs C1 only (millpond.driver.driver_jit), else "full": read from the JVM itself."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic session's driver JVM (None only in pyspark's types)
    runtime = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    return "quick" if QUICK_OPTIONS in list(runtime.getInputArguments()) else "full"


def class_archive_in_effect(spark: SparkSession) -> str | None:
    """The class-data archive the driver JVM was started with (millpond.driver.class_archive), read from the JVM."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    arguments = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    found = [str(a).split("=", 1)[1] for a in arguments if str(a).startswith("-XX:SharedArchiveFile=")]
    return found[-1] if found else None


def compiles_huge_methods(spark: SparkSession) -> bool:
    """Whether the driver JVM JIT-compiles methods over 8,000 bytecode bytes (millpond.driver.driver_jit): read from it."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    diagnostic = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    return diagnostic.getVMOption("DontCompileHugeMethods").getValue() == "false"
