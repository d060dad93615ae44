"""The one place millpond changes its own process's environment or builds a child process's.

The environment is edited at all because pyspark, spark-submit and the JVM they launch take settings only from it
(`SPARK_REMOTE`, the Python workers' `PYTHONPATH`, `SPARK_LOCAL_IP`), and a batch running in the engine's Python
worker learns its run's settings only through it. Elsewhere the environment is read, never written
(tests/unit/test_process_env.py fails on a write outside this module), so a reader of any other module can trust
that what it reads is what the process started with, or was set here for a reason given at the call.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

Changes = Mapping[str, str | None]  # a name set to a value, or removed (None)


def child(changes: Changes | None = None) -> dict[str, str]:
    """This process's environment with `changes` applied: what a child process is started with."""
    env = dict(os.environ)
    _apply(env, changes or {})
    return env


@contextmanager
def scoped(changes: Changes) -> Iterator[None]:
    """`changes` while the block runs (what a JVM or spark-submit started inside it inherits); every name changed
    is restored afterwards, also when the block raises."""
    saved = {name: os.environ.get(name) for name in changes}
    _apply(os.environ, changes)
    try:
        yield
    finally:
        _apply(os.environ, saved)


def for_process(changes: Changes) -> None:
    """`changes` for the rest of this process's life: for a process that exists to do one thing with them (a build
    step, a batch in the engine's worker), or a value that must not leak into what it starts."""
    _apply(os.environ, changes)


def default_for_process(name: str, value: str) -> None:
    """`name` set to `value` for the rest of this process's life unless it is set already."""
    os.environ.setdefault(name, value)


def replace_with_prefix(prefix: str, values: Mapping[str, str]) -> None:
    """Every name starting with `prefix` that `values` does not hold removed, and `values` set: a process that serves
    one run after another takes each run's settings whole, none left over from the previous one."""
    stale = {name: None for name in os.environ if name.startswith(prefix) and name not in values}
    _apply(os.environ, {**stale, **values})


def _apply(env: os._Environ[str] | dict[str, str], changes: Changes) -> None:
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
