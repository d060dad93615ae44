"""The warm driver: one Spark session that runs the lake's pipelines one run at a time, as clients hand them over.

    MILLPOND_LAKE=<lake> python -m millpond.engine.warm_driver_server      (millpond.engine.warm_driver starts it)

Each run is `runner.main(argv)` with the client's MILLPOND_* settings and working directory, its output streamed
back to the client, so a run here is the same run as a cold one: same spec check, lock, checkpoints and event log.
What stays warm is the JVM (classes loaded, code compiled) and the Python imports. Delta's table cache is dropped
before each run: a table may have been rebuilt or restored by another process since the last one.

A client that goes away mid-run ends this process at once (its JVM dies with it), as killing a spark-submit task
does; the checkpoint makes the next run replay the unfinished batch. The driver exits after an idle hour
(MILLPOND_WARM_DRIVER_IDLE_SECONDS), after MILLPOND_WARM_DRIVER_MAX_RUNS runs, on `millpond driver stop`, or when
a client's millpond code or JVM settings differ from its own (it answers "retired" and the client starts another).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from millpond import settings
from millpond.engine import warm_driver

# Settings read once, when the JVM starts, with their defaults: a client asking for others needs another driver.
JVM_SETTINGS = {
    s.name: s.default for s in (settings.DRIVER_MEMORY, settings.SPARK_MASTER, settings.SPARK_UI, settings.DRIVER_JIT)
}
# A long-lived driver keeps the UI's history of every query it ran unless told otherwise.
RETENTION_CONF = {
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.sql.streaming.ui.retainedQueries": "20",
    "spark.sql.streaming.ui.retainedProgressUpdates": "10",
}


def jvm_settings(env: Mapping[str, str]) -> dict[str, str]:
    return {key: (env.get(key) or default).strip().lower() for key, default in JVM_SETTINGS.items()}


def log(text: str) -> None:
    stderr = sys.__stderr__  # the process's own, not a run's (StreamTo)
    assert stderr is not None  # the driver is started with one (warm_driver.start)
    stderr.write(f"{datetime.now(UTC).isoformat(timespec='seconds')} warm driver: {text}\n")
    stderr.flush()


class Connection:
    """One client's socket: JSON lines out; a reader thread that ends the process if the client leaves mid-run."""

    def __init__(self, conn: socket.socket):
        self.conn, self.lock = conn, threading.Lock()
        self.in_run = False  # only a client that leaves while its run is going stops the driver

    def send(self, **message: Any) -> None:
        data = json.dumps(message).encode() + b"\n"
        with self.lock:
            try:
                self.conn.sendall(data)
            except OSError:
                self.client_gone("its connection broke")

    def watch(self) -> None:
        """Runs in a thread during a run: the client sends nothing more, so any end of its stream means it left."""
        try:
            while self.conn.recv(4096):
                pass
        except OSError:
            pass
        self.client_gone("it closed the connection")

    def client_gone(self, why: str) -> None:
        if not self.in_run:
            return
        log(f"the client left mid-run ({why}): exiting, as a killed spark-submit would; the next run replays")
        os._exit(warm_driver.DIED)


class StreamTo:
    """sys.stdout/sys.stderr of a run: each line goes to the client as soon as it is complete."""

    def __init__(self, connection: Connection, kind: str):
        self.connection, self.kind, self.pending = connection, kind, ""

    def write(self, text: str) -> int:
        lines, _, self.pending = (self.pending + text).rpartition("\n")
        if lines:
            self.connection.send(**{self.kind: lines + "\n"})
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.connection.send(**{self.kind: self.pending})
            self.pending = ""

    def isatty(self) -> bool:
        return False


class WarmDriver:
    def __init__(self) -> None:
        from millpond.engine.driver_jit import forced_mode, java_options
        from millpond.engine.session import build_spark_session, driver_jit_in_effect

        self.started = time.time()
        self.runs = 0
        self.code = warm_driver.code_fingerprint()
        self.jvm_settings = jvm_settings(os.environ)
        self.idle_seconds = settings.WARM_DRIVER_IDLE_SECONDS.seconds()
        self.max_runs = settings.WARM_DRIVER_MAX_RUNS.integer()
        self.run_lock = threading.Lock()
        self.last_active = time.monotonic()
        self.stopping = False
        os.environ[warm_driver.SERVING_ENV] = "1"
        # The full JIT unless forced: C2's compiled code pays off over many runs (C1 only suits one short run).
        jit_options = java_options(forced_mode() if forced_mode() in ("quick", "off") else "full")
        self.spark = build_spark_session(
            "millpond:warm-driver", driver_java_options=jit_options, launch_conf=RETENTION_CONF
        )
        self.jit = driver_jit_in_effect(self.spark)

    def status(self) -> dict:
        return {
            "pid": os.getpid(),
            "lake": str(settings.lake_root()),
            "runs": self.runs,
            "jit": self.jit,
            "up_seconds": round(time.time() - self.started, 1),
            "busy": self.run_lock.locked(),
            "max_runs": self.max_runs,
            "idle_seconds": self.idle_seconds,
        }

    def retire_reason(self, message: dict) -> str | None:
        if message.get("code") != self.code:
            return "millpond's code changed since it started"
        asked = jvm_settings(message.get("env", {}))
        if asked != self.jvm_settings:
            changed = sorted(k for k in JVM_SETTINGS if asked[k] != self.jvm_settings[k])
            return f"the run asks for other JVM settings ({', '.join(changed)})"
        if self.runs >= self.max_runs:
            return f"it served its {self.max_runs} runs"
        return None

    def handle(self, conn: socket.socket) -> None:
        connection = Connection(conn)
        try:
            message = json.loads(conn.makefile("rb").readline() or b"{}")
            op = message.get("op")
            if op == "status":
                connection.send(**self.status())
            elif op == "stop":
                self.stopping = True
                connection.send(stopping=True)
            elif op == "run":
                with self.run_lock:
                    reason = self.retire_reason(message)
                    if reason or self.stopping:
                        self.stopping = True
                        connection.send(retired=reason or "it is stopping")
                    else:
                        connection.send(accepted=os.getpid(), served=self.runs)
                        connection.in_run = True
                        code = self.run(message, connection)
                        connection.in_run = False
                        connection.send(exit=code)
                    self.last_active = time.monotonic()
        finally:
            conn.close()

    def run(self, message: dict, connection: Connection) -> int:
        from millpond.engine import runner

        self.runs += 1
        log(f"run {self.runs}: {' '.join(message['argv'])}")
        saved_env = {k: v for k, v in os.environ.items() if k.startswith("MILLPOND_")}
        saved_cwd = os.getcwd()
        for key in saved_env:
            if key != warm_driver.SERVING_ENV:
                del os.environ[key]
        os.environ.update(message.get("env", {}))
        threading.Thread(target=connection.watch, daemon=True).start()
        sys.stdout, sys.stderr = StreamTo(connection, "out"), StreamTo(connection, "err")
        started = time.perf_counter()
        try:
            os.chdir(message.get("cwd") or saved_cwd)
            # Another process may have rebuilt or restored a table since the last run: read every log afresh.
            jvm = self.spark._jvm
            assert jvm is not None  # a classic session's driver JVM (None only in pyspark's types)
            jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
            code = runner.main(message["argv"])
        except SystemExit as exc:  # argparse's --help and usage errors
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            sys.stderr.write(traceback.format_exc())
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
            os.chdir(saved_cwd)
            for key in [k for k in os.environ if k.startswith("MILLPOND_")]:
                del os.environ[key]
            os.environ.update(saved_env)
        log(f"run {self.runs} exited {code} in {time.perf_counter() - started:.1f} s")
        return code

    def serve(self) -> int:
        path = warm_driver.socket_path()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path.unlink(missing_ok=True)
        server.bind(str(path))
        server.listen(16)
        server.settimeout(1.0)
        self.last_active = time.monotonic()  # idle time counts from here, not from before the JVM started
        log(f"pid {os.getpid()} serving {settings.lake_root()} on {path} (JIT {self.jit})")
        try:
            while True:
                if self.stopping and not self.run_lock.locked():
                    log("stopping")
                    return 0
                if not self.run_lock.locked() and time.monotonic() - self.last_active > self.idle_seconds:
                    log(f"idle for {self.idle_seconds:.0f} s: exiting")
                    return 0
                if self.runs >= self.max_runs and not self.run_lock.locked():
                    log(f"served {self.runs} runs: exiting (the next run starts a fresh driver)")
                    return 0
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.settimeout(None)
                threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        finally:
            server.close()
            path.unlink(missing_ok=True)
            self.spark.stop()


def main() -> int:
    return WarmDriver().serve()


if __name__ == "__main__":
    sys.exit(main())
