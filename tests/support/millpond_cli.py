"""`millpond` as a user runs it: a process of its own, from the repository, with the environment given (the test's
own by default). The catalog tests read tables by name this way because the JVM `millpond sql` starts is what they
test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import REPO


def millpond(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "millpond.cli", *args],
        cwd=REPO,
        env=os.environ.copy() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def sql(query: str, env: dict[str, str] | None = None, output: str = "json") -> str:
    """`millpond sql` 's output, failing the test (with its stderr's end) if the command fails."""
    done = millpond("sql", query, "--format", output, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def sql_rows(query: str, env: dict[str, str] | None = None) -> list[dict]:
    return json.loads(sql(query, env))
