"""One writer per pipeline; a dead holder never blocks the next run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from millpond.lake import paths
from millpond.lake.lock import pipeline_lock
from millpond.lake.lock_errors import PipelineBusy

pytestmark = pytest.mark.unit

HOLD = """
import sys, time
from millpond.lake.lock import pipeline_lock
with pipeline_lock("activity", "holder-run"):
    print("locked", flush=True)
    time.sleep(120)
"""


def start_holder():
    proc = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_writer_is_refused_with_the_holder_named(lake):
    holder = start_holder()
    try:
        with pytest.raises(PipelineBusy) as caught:
            with pipeline_lock("activity", "second-run"):
                pass
        assert "holder-run" in str(caught.value) and f"pid {holder.pid}" in str(caught.value)
        assert "--wait" in str(caught.value)
    finally:
        holder.kill()
        holder.wait()


def test_lock_of_a_sigkilled_holder_is_free_at_once(lake):
    holder = start_holder()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with pipeline_lock("activity", "next-run"):
        assert "next-run" in paths.lock_path("activity").read_text()


def test_waiting_writer_gets_the_lock_when_the_holder_finishes(lake):
    holder = start_holder()
    started = time.monotonic()
    subprocess.Popen(["sh", "-c", f"sleep 1; kill {holder.pid}"])
    with pipeline_lock("activity", "waiter", wait_seconds=30):
        assert time.monotonic() - started >= 0.9
    holder.wait()


def test_other_pipelines_are_not_blocked(lake):
    holder = start_holder()
    try:
        with pipeline_lock("clicks", "independent"):
            pass
    finally:
        holder.kill()
        holder.wait()
