"""`millpond engine start|status|stop`: a Spark Connect server that stays up between runs (the engine).

A run that starts its own JVM spends most of a small increment starting it. The engine is Spark's own
long-lived driver, the Spark Connect server shipped in the pyspark wheel, started with millpond's jars,
extensions and confs (millpond.driver.spark_conf). Runs reach it through `SPARK_REMOTE` (Airflow's tasks through
the connection millpond.airflow.spark_app.engine_remote reads), each in a Connect session of its own
(millpond.driver.targets.OnEngine; millpond.driver.connect_batch has what runs server-side).

Safety:
- the server listens on 127.0.0.1 only (`spark.connect.grpc.binding.address`) and wants a token generated at
  start (given to the server through its environment, never on a command line `ps` shows);
- Spark's own ports (the driver's RPC, the block manager) want Spark's authentication too (`spark.authenticate`,
  `_spark_transport_conf`), and the web UI, which has none, is off (`_ui_conf`);
- the state file (pid, port, token, code fingerprint, the machine it runs on) lives in the lake's `_system/engine/`
  (an object-store lake: a local folder of the user, millpond.lake.paths.engine_dir), a folder only its owner may
  open; a state file another user owns, others may read, that is a symlink, or that records another machine's
  engine is refused, not trusted;
- the code the server runs is fingerprinted at start (millpond's files, the project's transform packages, the
  jars, the versions of pyspark, Delta, GX and their friends) and carried in the server's own conf
  (`spark.millpond.fingerprint`): a run whose code differs refuses, naming the restart to do. The run does not
  restart the engine itself: other pipelines' runs may be using it.

This module imports no pyspark: `status` and `stop` answer in well under a second.
"""

from __future__ import annotations

import errno
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

import millpond
from millpond import process_env, settings
from millpond.catalog import database as catalog_database
from millpond.catalog import metastore
from millpond.driver import class_archive, jars, s3a
from millpond.driver.spark_conf import LISTING_THRESHOLD, LOCAL_LISTING_THRESHOLD, base_conf
from millpond.lake import paths
from millpond.spec import Pipeline, SpecError, load_pipeline

if TYPE_CHECKING:
    from millpond.lake.paths import LakePath


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
CLASS_PATH = "spark.driver.extraClassPath"


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
    machine: str = ""  # the host it runs on: a lake on a shared folder is seen by several ("" = written before)

    @property
    def remote(self) -> str:
        """The SPARK_REMOTE value. `localhost`, not 127.0.0.1: pyspark sends a token without TLS only to a host
        named `localhost` (gRPC local credentials); to any other host it insists on TLS."""
        return f"sc://{self.client_host}:{self.port}/" + (f";token={self.token}" if self.token else "")

    @property
    def client_host(self) -> str:
        return "localhost" if self.host in ("127.0.0.1", "localhost") else self.host

    @property
    def jdbc_url(self) -> str:
        """The same engine for SQL clients: Spark Connect's JDBC driver (pyspark's `jars/connect-repl/`, beeline with
        SPARK_CONNECT_BEELINE=1) takes SPARK_REMOTE's form behind `jdbc:`."""
        return f"jdbc:{self.remote}"

    @property
    def airflow_connection(self) -> str:
        """The same engine as an Airflow connection (AIRFLOW_CONN_SPARK_CONNECT_MILLPOND, the Spark provider's Spark
        Connect type), which millpond.airflow.spark_app.engine_remote turns back into `remote`."""
        conn = {"conn_type": "spark_connect", "host": self.client_host, "port": self.port}
        return json.dumps({**conn, **({"password": self.token} if self.token else {})})


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
    """The engine's state file, or None. Refused (EngineError) when it is a symlink (opened with O_NOFOLLOW: one
    planted by another user is not followed), when another user owns it or others may read it, when its folder is
    not this user's own, or when it records an engine of another machine (a lake on a shared folder)."""
    path = state_path(lake)
    _check_folder(path.parent)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise EngineError(
                f"{path} is a symlink: not followed (the engine's state file holds its token, and a link may lead "
                "anywhere another user chose). Fix: remove it, then `millpond engine start` as the user running "
                "millpond"
            ) from None
        raise
    with os.fdopen(fd) as handle:
        _check_owned(os.fstat(handle.fileno()), path, private=True)
        data = json.load(handle)
    state = EngineState(**{k: data[k] for k in EngineState.__dataclass_fields__ if k in data})
    _check_this_machine(state, path)
    return state


def _check_owned(info: os.stat_result, path: Path, private: bool) -> None:
    """Refuse what another user owns, or (`private`) what others may read or write."""
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid() or (private and mode & 0o077):
        raise EngineError(
            f"{path} is owned by uid {info.st_uid} with mode {mode:o}: not trusted (it holds the engine's token). "
            "Fix: remove it, then `millpond engine start` as the user running millpond"
        )


def _check_folder(folder: Path) -> None:
    """The engine's folder is this user's own and no symlink: whoever may write in it may plant its state file."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise EngineError(
            f"the engine's folder {folder} is a symlink: not followed. Fix: remove it, then `millpond engine start`"
        )
    _check_owned(info, folder, private=False)


def _check_this_machine(state: EngineState, path: Path) -> None:
    """A state another machine wrote names a pid and a 127.0.0.1 port of that machine: here they would be another
    process, so it is refused rather than taken for this machine's engine (a lake on a folder several hosts mount)."""
    here = _machine()
    if state.machine and state.machine != here:
        raise EngineError(
            f"{path} records the engine of machine {state.machine!r} (pid {state.pid}, port {state.port} there), "
            f"not of this one ({here!r}): one engine per lake, run on one machine. Fix: use that engine from "
            f"{state.machine} (or set {REMOTE_ENV} to reach it), or stop it there (`millpond engine stop` on "
            f"{state.machine}) before starting one here. If this machine was only renamed, check that pid "
            f"{state.pid} here is the engine, stop it, and remove {path}"
        )


def _write_state(state: EngineState, lake: LakePath) -> None:
    folder = paths.engine_dir(lake)
    folder.mkdir(parents=True, exist_ok=True)
    _check_folder(folder)
    os.chmod(folder, 0o700)
    tmp = folder / f".engine.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(state.__dict__, handle, indent=2)
    os.replace(tmp, state_path(lake))  # replaces a symlink itself, never what it points to


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
    master: str,
    host: str,
    port: int,
    fingerprint: str,
    transforms: dict[str, str] | None = None,
    token: bool = True,
    catalog: dict[str, str] | None = None,
) -> list[str]:
    """spark-submit of the Connect server with millpond's jars and confs (those session.build_spark_session sets),
    and on an object-store lake the s3a jars and settings (never a credential: the server's batches reach the bucket
    with the AWS_* variables of the environment it was started in). With `token`, Spark's own ports and its UI are
    closed too (`_spark_transport_conf`, `_ui_conf`); without (a private container network) they stay as Spark's
    defaults, as the Connect port does. `catalog`: the metastore's launch settings (millpond.catalog.metastore), so
    every session on the engine, and SQL clients, see tables by name."""

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is a dependency of millpond"
    submit = Path(spec.origin).parent / "bin" / "spark-submit"
    lake_launch = s3a.launch_conf(master)  # {} for a folder lake
    shipped = [*jars.spark_jars(), *filter(None, lake_launch.pop("spark.jars", "").split(","))]
    catalog = dict(catalog or {})
    class_path = os.pathsep.join(filter(None, [lake_launch.pop(CLASS_PATH, ""), catalog.pop(CLASS_PATH, "")]))
    conf = {
        **base_conf(),
        **s3a.session_conf(),
        **lake_launch,
        **catalog,
        **({CLASS_PATH: class_path} if class_path else {}),
        "spark.jars": ",".join(shipped),
        **_ui_conf(token),
        **(_spark_transport_conf(master) if token else {}),
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
    archive = class_archive.driver_options(class_path)
    if archive:  # the server's JVM starts on the runs' class-data archive too
        conf["spark.driver.extraJavaOptions"] = archive
    command = [str(submit), "--master", master, "--class", SERVER_CLASS]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]


def _spark_transport_conf(master: str) -> dict[str, str]:
    """Spark's authentication on the driver's RPC and block manager ports, which the Connect token does not cover:
    any local user could otherwise send them RPCs.

    On a local master Spark 4.2 makes the secret itself, in the JVM, at start (SecurityManager.initializeAuth
    generates one for `local[...]`, `yarn` and k8s when no `spark.authenticate.secret.*.file` is set): it never
    leaves the process, so no command line, environment or file holds it, and nothing else needs it (the executors
    are the same JVM; Python workers have their own per-worker secret). `spark.network.crypto.enabled` chooses
    Spark's AES-based handshake over SASL DIGEST-MD5, with no SASL fallback; the cost is nil on a local master,
    whose driver and executors talk in-process. A cluster master (`spark://...`) wants the cluster's shared secret
    in `spark.authenticate.secret`, which its operators set in spark-defaults.conf on every node: millpond leaves it
    to them. Known gap (Spark 4.2): the driver's file server answers a StreamRequest before authentication, so a
    local user who knows a file's name can still fetch what the application shipped (`spark.jars`, public jars)."""
    if not master.startswith("local"):
        return {}
    return {
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        "spark.network.crypto.saslFallback": "false",
    }


def _ui_conf(token: bool) -> dict[str, str]:
    """The web UI is off on an engine with a token, whatever MILLPOND_SPARK_UI says: Spark's UI has no
    authentication of its own (it trusts a servlet filter the deployment supplies), so every local user could read
    every run's plans, paths and settings and kill its jobs. Off is what a shared engine can defend; a bound-to-
    loopback UI is not (other users share loopback). The event log (`spark.eventLog.*` in spark-defaults.conf) and
    a history server give the same pages afterwards; a run in a JVM of its own still honours MILLPOND_SPARK_UI.
    Without a token (a private container network) the setting applies."""
    return {"spark.ui.enabled": "false" if token else settings.SPARK_UI.value()}


def server_environment(token: str) -> dict[str, str]:
    """The venv's python for the server's Python workers (foreachBatch), the project on their path (transforms
    are imported by module path), and the token through Spark's own variable."""
    env = process_env.child({REMOTE_ENV: None, AUTH_ENV: None})
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
    _check_folder(paths.engine_dir(lake))  # before its mode is set and its log opened: both follow a symlink
    os.chmod(paths.engine_dir(lake), 0o700)
    master = master or settings.SPARK_MASTER.value()
    catalog = _catalog_launch_conf()
    command = server_command(master, host, port, fingerprint, transform_parts(parts), token, catalog)
    if token and settings.SPARK_UI.value().lower() == "true":
        print(
            f"millpond: {settings.SPARK_UI.name}=true is not honoured by an engine with a token: Spark's UI has no "
            "authentication (docs/engine.md)",
            file=sys.stderr,
        )
    if foreground:  # spark-submit execs the JVM: this pid becomes the server's
        _write_state(EngineState(os.getpid(), port, host, secret, fingerprint, parts, _now(), "-", _machine()), lake)
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
    state = EngineState(process.pid, port, host, secret, fingerprint, parts, _now(), str(log), _machine())
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


def _machine() -> str:
    return socket.gethostname()


def _catalog_launch_conf() -> dict[str, str]:
    """The catalog's settings for the server (millpond's PostgreSQL started first if need be), or none, said loudly,
    when the catalog cannot be reached: runs work by path and need no catalog, so they are not stopped for it."""
    try:
        return metastore.launch_conf(catalog_database.connection(_say))
    except Exception as exc:  # noqa: BLE001 - whatever stops the catalog (no server, no binary, no account) must not stop runs
        _say(
            f"millpond: the engine starts WITHOUT the catalog (tables by path only; `millpond sql` starts its own "
            f"JVM): {exc}"
        )
        return {}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
