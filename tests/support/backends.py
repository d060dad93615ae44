"""The two places a run executes, as one interface for the tests written once for both (the way PySpark's parity
tests run one test body on a classic session and on Spark Connect; differences are this module's overrides).

- `OwnJvm`: a run with a JVM of its own. A run a test only needs done runs in-process on the test worker's Spark
  session (no new JVM); a run that is killed, or whose process is the subject, is a `millpond run` process.
- `OnEngine`: every run goes to the test worker's engine (tests/conftest.py::engine_server) through SPARK_REMOTE, as
  a `millpond` client process (a process that opened a Connect session builds every later Column for Connect, so
  the test's own process never opens one).

Tests take the `backend` fixture (tests/conftest.py), which runs each of them once per backend.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import time
from pathlib import Path

from tests.support.airflow_run import wait_for
from tests.support.stress import MILLPOND, communicate_or_dump

# What a process holding a Connect session (or the test-engine mode) leaves in the environment, which would send a
# run with a JVM of its own to an engine.
CONNECT_VARIABLES = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


class OwnJvm:
    """A run in a JVM of its own (no SPARK_REMOTE)."""

    name = "own_jvm"
    lease_seconds = "8"  # an object-store lake's lease: a SIGKILLed run's lapses this soon

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a `millpond` process of this backend: this process's, less any fault point."""
        env = {k: v for k, v in os.environ.items() if k not in (*CONNECT_VARIABLES, "MILLPOND_FAULT")}
        return {**env, **extra}

    def start(self, *args: str, fault: str | None = None, pipeline: str = "activity") -> subprocess.Popen:
        """`millpond run` as a process of its own session (so a test can kill its whole group)."""
        env = self.env(**({"MILLPOND_FAULT": fault} if fault else {}))
        return subprocess.Popen(
            [MILLPOND, "run", pipeline, *args],
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, *args: str, pipeline: str = "activity") -> tuple[int, str, str]:
        """A whole run, in-process on the worker's session: (exit code, stdout, stderr)."""
        from millpond.driver import runner

        return _in_process(lambda: runner.main([pipeline, *args]))

    def succeed(self, *args: str, pipeline: str = "activity") -> str:
        """A whole run that must succeed; its stdout."""
        code, out, err = self.run(*args, pipeline=pipeline)
        assert code == 0, f"{self.name}: the run {pipeline} {' '.join(args)} exited {code}:\n{(out + err)[-4000:]}"
        return out

    def command(self, *args: str) -> tuple[int, str, str]:
        """Another `millpond` command (check, status), in-process: (exit code, stdout, stderr)."""
        from millpond.cli import main

        return _in_process(lambda: main(list(args)))

    def process(self, *args: str) -> tuple[int, str, str]:
        """A `millpond` command as a process of this backend's (a command an object-store lake's run needs its
        JVM's s3a jars for, which the worker's session lacks): (exit code, stdout, stderr)."""
        proc = subprocess.Popen(
            [MILLPOND, *args], env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            out, err = communicate_or_dump(proc, timeout=900)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{self.hang_context()}") from None
        return proc.returncode, out, err

    def hang_context(self) -> str:
        """What else a hung run's failure shows (the engine's log, on the engine)."""
        return ""

    def assert_ran_here(self, out: str) -> None:
        """What a run's output says about where it ran: not on an engine."""
        assert "millpond: on the engine at" not in out, out[-3000:]

    def after_death(self) -> None:
        """Nothing to wait for: the killed process took its driver, and every commit it could make, with it."""


class OnEngine(OwnJvm):
    """Every run on the test worker's engine (a Spark Connect server), through SPARK_REMOTE."""

    name = "engine"
    lease_seconds = "15"  # a live run's renewal, checked by the server's batches, has a sixth of it to land

    def __init__(self, server: dict):
        self.remote, self.log, self.folder = server["remote"], Path(server["log"]), Path(server["folder"])
        self.airflow_connection = server["airflow_connection"]  # the same engine, as `make up` gives it to Airflow

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(SPARK_REMOTE=self.remote, **extra)

    def run(self, *args: str, pipeline: str = "activity") -> tuple[int, str, str]:
        return self.command("run", pipeline, *args)

    def command(self, *args: str) -> tuple[int, str, str]:
        return self.process(*args)

    def hang_context(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()[-60:]
        return "\nthe engine's log, last lines:\n" + "\n".join(lines)

    def assert_ran_here(self, out: str) -> None:
        assert "millpond: on the engine at sc://localhost:" in out, out[-3000:]
        assert "driver JIT" not in out, out[-3000:]  # no JVM of its own

    def after_death(self) -> None:
        """A killed run's queries live on in the server until their batch's check before its next commit finds the
        run gone (millpond.driver.connect_batch): wait until the engine has ended every streaming query it started
        (its log says so), so that whatever a test then reads is all the dead run will ever have committed."""
        time.sleep(2)  # a start request already sent by the run reaches the server's log
        assert wait_for(lambda: not running_queries(self.log), timeout=180, interval=0.25), (
            f"the engine still runs queries of a dead run: {running_queries(self.log)}"
        )


Backend = OwnJvm  # the interface: OnEngine overrides what differs

STARTED = re.compile(r"Adding new query to the cache\. .*run id: ([0-9a-f-]{36})")
ENDED = re.compile(
    r"(?:runId = ([0-9a-f-]{36})\] (?:terminated with error|has been shut down)|"
    r"Cleaning up runner for queryId \S+ runId ([0-9a-f-]{36}))"
)


def running_queries(log: Path) -> set[str]:
    """The run ids of the streaming queries the engine's log shows started and not ended."""
    text = log.read_text(errors="replace")
    ended = {a or b for a, b in ENDED.findall(text)}
    return set(STARTED.findall(text)) - ended


def _in_process(call) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = call()
    return code, out.getvalue(), err.getvalue()
