"""A run that seems stuck says where it is: `kill -USR1` makes a `millpond run` process print its threads' Python
stacks and go on (runner.dump_stacks_on_sigusr1), and the tests' process helper asks that of a run that outlives its
timeout before it kills it, so a hang in CI names its place."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.support.stress import communicate_or_dump

pytestmark = pytest.mark.unit

STUCK = """
from millpond.driver.runner import dump_stacks_on_sigusr1
import sys, time
dump_stacks_on_sigusr1()

def waiting_for_the_server():
    print("ready", flush=True)  # from here on, the stack is this function's
    time.sleep(float(sys.argv[1]))

waiting_for_the_server()
print("went on", flush=True)
"""


def start(seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK, str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_sigusr1_prints_where_the_run_is_and_the_run_goes_on():
    proc = start(1.5)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == "went on\n"
    assert "in waiting_for_the_server" in err and "Current thread" in err


def test_a_process_outliving_its_timeout_fails_the_test_with_its_stacks():
    proc = start(600)
    began = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)still ran after 2 s; where it was:.*in waiting_for_the_server"):
        communicate_or_dump(proc, timeout=2)
    assert proc.returncode is not None and time.monotonic() - began < 30  # killed, not waited for
