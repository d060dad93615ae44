"""`millpond engine start|status|stop`: a Spark Connect server that stays up between runs (the engine).

A run that starts its own JVM spends most of a small increment starting it. The engine is Spark's own
long-lived driver, the Spark Connect server shipped in the pyspark wheel, started with millpond's jars,
extensions and confs (millpond.engine.session). Runs reach it through `SPARK_REMOTE`, pyspark's own variable,
each in a Connect session of its own (millpond.engine.connect_batch has what runs server-side).

Safety:
- the server listens on 127.0.0.1 only (`spark.connect.grpc.binding.address`) and wants a token generated at
  start (given to the server through its environment, never on a command line `ps` shows);
- the state file (pid, port, token, code fingerprint) lives in the lake's `_system/engine/` (an object-store
  lake: a local folder of the user, millpond.lake.paths.engine_dir), a folder only its owner may open; a state
  file another user owns or others may read is refused, not trusted;
- the code the server runs is fingerprinted at start (millpond's files, the project's transform packages, the
  jars, the versions of pyspark, Delta, GX and their friends) and carried in the server's own conf
  (`spark.millpond.fingerprint`): a run whose code differs refuses, naming the restart to do. The run does not
  restart the engine itself: other pipelines' runs may be using it.

This module imports no pyspark: `status` and `stop` answer in well under a second.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from millpond import settings
from millpond.lake import paths

if TYPE_CHECKING:
    from millpond.lake.paths import LakePath
    from millpond.spec import Pipeline

FINGERPRINT_CONF = "spark.millpond.fingerprint"
TRANSFORMS_CONF = "spark.millpond.transforms"  # JSON: {"transforms:<package>": hash} of the project at start
TRANSFORMS = "transforms:"
AUTH_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # Spark's own: the server reads its token from it
REMOTE_ENV = "SPARK_REMOTE"  # pyspark's own: where a client session goes
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_SECONDS = 180.0
STOP_TIMEOUT_SECONDS = 30.0
# Python packages whose version changes what the server's batch workers run.
PACKAGES = ("pyspark", "pyspark-client", "delta-spark", "great-expectations", "deltalake", "pyarrow", "pandas")
RESTART = "millpond engine stop && millpond engine start"


class EngineError(RuntimeError):
    """The engine cannot be started, reached or trusted; the message says what to do."""


@dataclass(frozen=True)
class EngineState:
    pid: int
    port: int
    host: str
    token: str
    fingerprint: str
    parts: dict[str, str]
    started_at: str
    log: str

    @property
    def remote(self) -> str:
        """The SPARK_REMOTE value. `localhost`, not 127.0.0.1: pyspark sends a token without TLS only to a host
        named `localhost` (gRPC local credentials); to any other host it insists on TLS."""
        host = "localhost" if self.host in ("127.0.0.1", "localhost") else self.host
        return f"sc://{host}:{self.port}/" + (f";token={self.token}" if self.token else "")


def state_path(lake: LakePath | None = None) -> Path:
    return paths.engine_dir(lake) / "engine.json"


def log_path(lake: LakePath | None = None) -> Path:
    return paths.engine_dir(lake) / "engine.log"


def remote() -> str | None:
    """The engine a run uses: `SPARK_REMOTE` (pyspark's own variable), unless this process runs under spark-submit
    (a JVM of its own is already up)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    return os.environ.get(REMOTE_ENV, "").strip() or None


# ------------------------------------------------------------------------------------------------ fingerprint
def code_fingerprint(pipeline: Pipeline | None = None) -> tuple[str, dict[str, str]]:
    """(one hash, a hash per part) of the code a run executes: a different value means different code.

    The one hash covers what every run executes (millpond, the jars, the packages). Each project package a transform
    or stateful function comes from is a part of its own, `transforms:<package>`, outside the one hash: a run
    compares only the packages its own pipeline imports (`stale_transforms`), so runs of specs from another folder
    share an engine, and a changed package refuses only the runs that import it. Without `pipeline`, the packages of
    every spec in the pipelines folder (what `millpond engine start` records)."""
    import millpond
    from millpond.engine import jars

    package = Path(millpond.__file__).resolve().parent
    parts = {
        "millpond": _hash_files(package, sorted([*package.rglob("*.py"), *package.glob("lib/*.jar")])),
        "jars": _hash_files(None, [Path(j) for j in jars.spark_jars()]),
        "packages": hashlib.sha256(json.dumps(package_versions(), sort_keys=True).encode()).hexdigest()[:16],
    }
    whole = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    return whole, {**parts, **_hash_transforms(pipeline)}


def transform_parts(parts: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in parts.items() if name.startswith(TRANSFORMS)}


def stale_transforms(engine_parts: dict[str, str], run_parts: dict[str, str]) -> list[str]:
    """The run's transform packages the engine recorded otherwise, or not at all."""
    return sorted(name for name, value in transform_parts(run_parts).items() if engine_parts.get(name) != value)


def package_versions() -> dict[str, str]:
    versions = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "-"
    return versions


def _hash_files(base: Path | None, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(base) if base else file.name).encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _hash_transforms(pipeline: Pipeline | None) -> dict[str, str]:
    """`transforms:<package>` -> hash of each project package the pipeline's (or every spec's) transforms or stateful
    functions are imported from."""
    from millpond.spec import SpecError, load_pipeline

    if pipeline is not None:
        pipelines = [pipeline]
    else:
        pipelines = []
        for spec in sorted(settings.pipelines_dir().glob("*.y*ml")):
            try:
                pipelines.append(load_pipeline(str(spec)))
            except (SpecError, OSError):
                continue  # an invalid spec runs nothing
    tops: set[str] = set()
    for each in pipelines:
        for table in each.tables.values():
            for reference in (
                table.transform.function if table.transform else None,
                table.stateful.function if table.stateful else None,
            ):
                if reference:
                    tops.add(reference.split(":")[0].split(".")[0])
    project = settings.project_root()
    hashes = {}
    for top in sorted(tops):
        folder = project / top
        files = sorted(folder.rglob("*.py")) if folder.is_dir() else [p for p in [project / f"{top}.py"] if p.is_file()]
        hashes[f"{TRANSFORMS}{top}"] = _hash_files(project, files)
    return hashes


# ------------------------------------------------------------------------------------------------ state file
def read_state(lake: LakePath | None = None) -> EngineState | None:
    """The engine's state file, or None; refused (EngineError) when another user owns it or others may read it."""
    path = state_path(lake)
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise EngineError(
            f"{path} is owned by uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):o}: not trusted (it holds "
            "the engine's token). Fix: remove it, then `millpond engine start` as the user running millpond"
        )
    data = json.loads(path.read_text())
    return EngineState(**{k: data[k] for k in EngineState.__dataclass_fields__})


def _write_state(state: EngineState, lake: LakePath) -> None:
    folder = paths.engine_dir(lake)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    tmp = folder / f".engine.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(state.__dict__, handle, indent=2)
    os.replace(tmp, state_path(lake))


# ------------------------------------------------------------------------------------------------ process
def alive(state: EngineState) -> bool:
    """The recorded pid is a Spark Connect server of ours, and its port answers."""
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return SERVER_CLASS in cmdline and _port_open(state.host, state.port)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def server_command(
    master: str, host: str, port: int, fingerprint: str, transforms: dict[str, str] | None = None
) -> list[str]:
    """spark-submit of the Connect server with millpond's jars and confs (those session.build_spark_session sets),
    and on an object-store lake the s3a jars and settings (never a credential: the server's batches reach the bucket
    with the AWS_* variables of the environment it was started in)."""
    from millpond.engine import class_archive, jars, s3a
    from millpond.engine.session import LISTING_THRESHOLD, LOCAL_LISTING_THRESHOLD, base_conf

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is a dependency of millpond"
    submit = Path(spec.origin).parent / "bin" / "spark-submit"
    lake_launch = s3a.launch_conf(master)  # {} for a folder lake
    shipped = [*jars.spark_jars(), *filter(None, lake_launch.pop("spark.jars", "").split(","))]
    conf = {
        **base_conf(),
        **s3a.session_conf(),
        **lake_launch,
        "spark.jars": ",".join(shipped),
        "spark.ui.enabled": settings.SPARK_UI.value(),
        "spark.driver.memory": settings.DRIVER_MEMORY.value(),
        "spark.sql.shuffle.partitions": "2",
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        FINGERPRINT_CONF: fingerprint,
        TRANSFORMS_CONF: json.dumps(transforms or {}, sort_keys=True),
        "spark.app.name": "millpond-engine",
    }
    if master.startswith("local"):
        conf[LISTING_THRESHOLD] = str(LOCAL_LISTING_THRESHOLD)
    archive = class_archive.driver_options(lake_launch.get("spark.driver.extraClassPath", ""))
    if archive:  # the server's JVM starts on the runs' class-data archive too
        conf["spark.driver.extraJavaOptions"] = archive
    command = [str(submit), "--master", master, "--class", SERVER_CLASS]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]


def server_environment(token: str) -> dict[str, str]:
    """The venv's python for the server's Python workers (foreachBatch), the project on their path (transforms
    are imported by module path), and the token through Spark's own variable."""
    env = {k: v for k, v in os.environ.items() if k != REMOTE_ENV}
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    env.update(
        {
            "SPARK_HOME": str(Path(spec.origin).parent),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            "SPARK_LOCAL_IP": env.get("SPARK_LOCAL_IP", "127.0.0.1"),
            "PYTHONPATH": os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(settings.project_root())])),
        }
    )
    env.pop(AUTH_ENV, None)
    if token:
        env[AUTH_ENV] = token
    return env


def start(
    host: str = "127.0.0.1", port: int = 0, master: str | None = None, foreground: bool = False, token: bool = True
) -> tuple[EngineState, bool]:
    """(the lake's engine, whether this call started it). An engine already up with the same code is reused; one
    with other code is an error naming the restart. `foreground` becomes the server (a container's command).
    `token=False` only on a private network (docker-compose, no published port): pyspark sends a token only to
    `localhost` or over TLS."""
    lake = paths.lake_root()
    fingerprint, parts = code_fingerprint()
    current = read_state(lake)
    if current is not None and alive(current):
        if current.fingerprint != fingerprint or stale_transforms(current.parts, parts):
            raise EngineError(stale_message(current.fingerprint, fingerprint, current.parts, parts))
        return current, False
    secret = (os.environ.get(AUTH_ENV) or secrets.token_urlsafe(32)) if token else ""
    port = port or _free_port(host)
    log = log_path(lake)
    paths.engine_dir(lake).mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(paths.engine_dir(lake), 0o700)
    command = server_command(master or settings.SPARK_MASTER.value(), host, port, fingerprint, transform_parts(parts))
    if foreground:  # spark-submit execs the JVM: this pid becomes the server's
        _write_state(EngineState(os.getpid(), port, host, secret, fingerprint, parts, _now(), "-"), lake)
        os.execve(command[0], command, server_environment(secret))
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_environment(secret),
            start_new_session=True,  # its own process group: stop() ends the JVM and its Python workers together
        )
    state = EngineState(process.pid, port, host, secret, fingerprint, parts, _now(), str(log))
    _write_state(state, lake)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _port_open(host, port):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_group(process.pid)
            state_path(lake).unlink(missing_ok=True)
            raise EngineError(f"the engine did not start (exit {process.poll()}); see its log {log}:\n{_tail(log)}")
        time.sleep(0.5)
    return state, True


def stop(lake: LakePath | None = None) -> EngineState | None:
    """Stop the lake's engine (TERM to its process group, KILL after STOP_TIMEOUT_SECONDS); None if none ran."""
    state = read_state(lake)
    if state is None:
        return None
    if alive(state):
        _stop_group(state.pid)
    state_path(lake).unlink(missing_ok=True)
    return state


def _stop_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        _reap(pid)
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _reap(pid)


def _reap(pid: int) -> None:
    """A server this process started is its child: collect it, so its group empties."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def status(lake: LakePath | None = None) -> dict | None:
    """What `millpond engine status` prints: None when no engine is recorded for the lake."""
    state = read_state(lake)
    if state is None:
        return None
    fingerprint, parts = code_fingerprint()
    return {
        "up": alive(state),
        "pid": state.pid,
        "port": state.port,
        "host": state.host,
        "fingerprint": state.fingerprint,
        "current_code": fingerprint,
        "stale_parts": sorted(k for k in parts if state.parts.get(k) != parts[k]),
        "started_at": state.started_at,
        "log": state.log,
    }


def stale_message(server: str | None, ours: str, server_parts: dict[str, str], our_parts: dict[str, str]) -> str:
    changed = sorted(k for k in our_parts if server_parts.get(k) != our_parts[k])
    what = f" ({', '.join(changed)} changed)" if changed and server_parts else ""
    if server is None:
        return (
            f"the Spark Connect server at {REMOTE_ENV} was not started by `millpond engine start`, so the code it "
            f"runs is unknown. Fix: unset {REMOTE_ENV} to run in a JVM of this run's own, or point it at a millpond "
            "engine (`millpond engine start` prints the value)"
        )
    return (
        f"the engine at {REMOTE_ENV} runs other code than this run (engine {server}, this run {ours}){what}: it "
        f"would run stale code, so this run refuses. Fix: `{RESTART}`, then set {REMOTE_ENV} to the value it prints"
    )


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
