"""A driver that stays up between scheduled runs: runs are handed to it instead of each starting a JVM.

Every `millpond run` and every Airflow task otherwise starts a JVM that loads its classes and compiles each
query's code again; at 1 % new data that is most of a run (docs/benchmarks.md, B2). With MILLPOND_WARM_DRIVER=on
a run that has something new hands its arguments and MILLPOND_* settings to the lake's warm driver
(`millpond/engine/warm_driver_server.py`) over a Unix socket, starting it first if none is up, and streams its output
back. The run itself is the runner's: same lock, checkpoints, idempotent writes, event log.

Failure is a crash like any other: if the driver dies mid-run the client exits 1 and the next run (a new driver)
replays the batch from the checkpoint; if the client goes away mid-run (Airflow task killed), the driver exits at
once, as spark-submit's JVM dies with its task. This module imports no pyspark: the client side stays light.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from millpond import settings
from millpond.spec import SpecError

ENV = settings.WARM_DRIVER.name
SERVING_ENV = settings.WARM_DRIVER_SERVING.name  # set inside the driver: its runs never hand over again
START_TIMEOUT_SECONDS = 180.0
ANSWER_TIMEOUT_SECONDS = 5.0  # for status and stop, which a driver answers at once, even mid-run
DIED = 1  # the client's exit code when the driver went away mid-run (like a table failure: retry)


class WarmDriverError(RuntimeError):
    """No warm driver could be started or reached; the message names the log to read."""


def mode() -> str:
    """`on` or `off` (default); raises SpecError for anything else, before any lock or JVM."""
    value = settings.WARM_DRIVER.choice()
    if value not in ("on", "off"):
        raise SpecError(
            [
                f"{ENV}={settings.WARM_DRIVER.value()!r} is not a mode. Fix: set it to on (hand runs to a driver that "
                "stays up between runs) or off (the default: a JVM per run), or unset it"
            ]
        )
    return value


def wanted() -> bool:
    """Whether this process should hand its run over: switched on, and not the warm driver itself."""
    return mode() == "on" and not settings.WARM_DRIVER_SERVING.raw()


def runtime_dir() -> Path:
    """Sockets and logs live outside the lake (a lake may be restored or moved) in a directory only we can open."""
    folder = Path(tempfile.gettempdir()) / f"millpond-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _key(lake: Path) -> str:
    return hashlib.sha256(str(lake).encode()).hexdigest()[:20]


def socket_path(lake: Path | None = None) -> Path:
    """One driver per lake (a Unix socket path must stay under ~100 bytes, so it is named by the lake's hash)."""
    return runtime_dir() / f"{_key(lake or settings.lake_root())}.sock"


def log_path(lake: Path | None = None) -> Path:
    return runtime_dir() / f"{_key(lake or settings.lake_root())}.log"


def code_fingerprint() -> str:
    """millpond's own code (and the project's transforms under spark_jobs/): a driver started on other code retires."""
    import millpond

    digest = hashlib.sha256()
    for folder in (Path(millpond.__file__).resolve().parent, settings.project_root() / "spark_jobs"):
        for file in sorted(folder.rglob("*.py")):
            stat = file.stat()
            digest.update(f"{file}:{stat.st_mtime_ns}:{stat.st_size}\n".encode())
    return digest.hexdigest()


def run_env() -> dict[str, str]:
    """The settings a run reads from the environment: every MILLPOND_* variable but the switch itself."""
    return {k: v for k, v in os.environ.items() if k.startswith("MILLPOND_") and k not in (ENV, SERVING_ENV)}


def request(
    message: dict, lake: Path | None = None, timeout: float | None = ANSWER_TIMEOUT_SECONDS
) -> socket.socket | None:
    """Connect to the lake's driver and send one request; None when no driver listens.

    Raises WarmDriverError when something listens but does not take the request within `timeout`.
    """
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(str(socket_path(lake)))
        conn.sendall(json.dumps(message).encode() + b"\n")
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    except TimeoutError:
        conn.close()
        raise _not_answering(lake, timeout) from None
    return conn


def replies(conn: socket.socket, lake: Path | None = None) -> Iterator[dict[str, Any]]:
    """The driver's newline-delimited JSON messages until it closes the connection."""
    with conn, conn.makefile("rb") as stream:
        try:
            yield from (json.loads(line) for line in stream)
        except TimeoutError:
            raise _not_answering(lake, conn.gettimeout()) from None


def _not_answering(lake: Path | None, timeout: float | None) -> WarmDriverError:
    """A driver that holds the socket but does not answer (hung, or a machine too loaded to schedule it)."""
    return WarmDriverError(
        f"the warm driver of {lake or settings.lake_root()} did not answer within {timeout:.0f} s; "
        f"no second driver was started beside it. Fix: see its log {log_path(lake)}, then retry, "
        "or `millpond driver stop` (kill its pid if that does not answer either)"
    )


def status(lake: Path | None = None) -> dict | None:
    """The driver's pid, age, runs served and JIT, or None when none is up (a busy driver answers too)."""
    conn = request({"op": "status"}, lake)
    if conn is None:
        return None
    return next(replies(conn, lake), None)


def stop(lake: Path | None = None) -> bool:
    """Ask the driver to exit after its current run; False when none was up."""
    conn = request({"op": "stop"}, lake)
    if conn is None:
        return False
    for _ in replies(conn, lake):
        pass
    return True


def start(lake: Path | None = None, env: dict[str, str] | None = None) -> dict:
    """Start the lake's driver unless one is up, and wait until it answers (its first JVM start: ~10-20 s).

    A file lock makes concurrent first runs (two Airflow tasks) start one driver, not two. A driver that is there
    but does not answer raises WarmDriverError: starting another would take its socket from under it.
    """
    lake = lake or settings.lake_root()
    with open(runtime_dir() / f"{_key(lake)}.start.lock", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        running = status(lake)
        if running is not None:
            return running
        socket_path(lake).unlink(missing_ok=True)  # a driver killed with -9 leaves its socket behind
        log = open(log_path(lake), "ab")  # noqa: SIM115 - handed to the child
        child_env = {**os.environ, **(env or {}), "MILLPOND_LAKE": str(lake), "PYTHONPATH": _pythonpath()}
        child_env.pop(ENV, None)
        process = subprocess.Popen(
            [sys.executable, "-m", "millpond.engine.warm_driver_server"],
            cwd=settings.project_root(),
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise WarmDriverError(
                    f"the warm driver exited with code {process.returncode} while starting; see {log_path(lake)}"
                )
            with contextlib.suppress(WarmDriverError):  # listening, but still starting its session
                running = status(lake)
                if running is not None:
                    return running
            time.sleep(0.2)
        process.kill()
        raise WarmDriverError(
            f"the warm driver did not answer within {START_TIMEOUT_SECONDS:.0f} s; see {log_path(lake)}"
        )


def _pythonpath() -> str:
    existing = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(filter(None, [str(settings.project_root()), existing]))


def run(
    argv: list[str],
    env: dict[str, str] | None = None,
    out: Callable[[str], None] | None = None,
    err: Callable[[str], None] | None = None,
) -> int:
    """Hand one run to the lake's warm driver (started if needed) and return the runner's exit code.

    `env` is the run's MILLPOND_* settings (default: this process's). A driver that retires (its code changed, or it
    reached its run limit) is replaced by a new one.
    """
    out = out or (lambda text: _write(sys.stdout, text))
    err = err or (lambda text: _write(sys.stderr, text))
    env = run_env() if env is None else env
    lake = Path(env.get("MILLPOND_LAKE") or settings.lake_root()).resolve()
    message = {"op": "run", "argv": list(argv), "env": env, "cwd": os.getcwd(), "code": code_fingerprint()}
    for _ in range(3):
        try:
            info = start(lake, env)
        except WarmDriverError as exc:
            err(f"millpond: {exc}\n")
            return DIED
        conn = request(message, lake, timeout=None)
        if conn is None:
            continue  # it exited between status and run (idle timeout): start another
        retired = accepted = None
        try:
            for reply in replies(conn, lake):
                if "accepted" in reply:
                    accepted = reply["accepted"]
                    err(
                        f"millpond: run handed to the warm driver (pid {accepted}, {reply['served']} run(s) served "
                        "before)\n"
                    )
                elif "out" in reply:
                    out(reply["out"])
                elif "err" in reply:
                    err(reply["err"])
                elif "exit" in reply:
                    return int(reply["exit"])
                elif "retired" in reply:
                    retired = reply["retired"]
        except (ConnectionError, json.JSONDecodeError):
            pass
        if accepted is None and retired is None:
            continue  # it closed without taking the run (exiting idle as we connected): start another
        if retired is None:
            err(
                f"millpond: the warm driver (pid {info['pid']}) stopped mid-run; the next run replays the "
                f"unfinished batch from its checkpoint. Its log: {log_path(lake)}\n"
            )
            return DIED
        err(f"millpond: the warm driver retired ({retired}); starting a new one\n")
        _wait_gone(info["pid"])
    err("millpond: no warm driver took the run after three tries; see " + str(log_path(lake)) + "\n")
    return DIED


def _wait_gone(pid: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def _write(stream: TextIO, text: str) -> None:
    with contextlib.suppress(BrokenPipeError):
        stream.write(text)
        stream.flush()
