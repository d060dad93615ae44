"""The guard a run's batches on the engine commit under (millpond.driver.run_guard): a batch commits only while
its run's holding of the pipeline lock (or, on an object-store lake, its lease) lasts, and a new holder waits for a
batch that is still committing.

The batch is played by this process (the guard needs no Spark); the runs holding the lock are real processes; the
lease is read as the store would answer (its object against a real store: tests/integration/object_store/)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
import uuid

import pytest

from millpond.driver import run_guard
from millpond.driver.run_guard import RunGuard, WriterGone
from millpond.lake import lease, paths
from millpond.lake.lock import holder_token, pipeline_lock

pytestmark = pytest.mark.unit

HOLD = """
import sys, time
from millpond.lake.lock import holder_token, pipeline_lock
with pipeline_lock("activity", "run-1", wait_seconds=float(sys.argv[1])):
    print(holder_token("activity"), flush=True)
    time.sleep(120)
"""


def hold(wait_seconds: float = 0) -> tuple[subprocess.Popen, str]:
    """A run holding the pipeline lock, and its holding's token."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(wait_seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def guard(token: str, pid: int) -> RunGuard:
    return RunGuard(str(paths.lock_path("activity")), str(paths.commit_lock_path("activity")), token, "run-1", pid)


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_each_taking_of_the_lock_has_a_token_of_its_own(lake):
    tokens = set()
    for _ in range(2):
        with pipeline_lock("activity", "run-1"):  # the same run id, as an Airflow retry has
            tokens.add(holder_token("activity"))
    assert len(tokens) == 2 and None not in tokens


def test_a_batch_commits_only_while_its_runs_holding_lasts(lake):
    first, token = hold()
    batch = guard(token, first.pid)
    try:
        batch.check()  # held by its run: it may commit
        batch.release()
    finally:
        stop(first)
    with pytest.raises(WriterGone, match="is gone"):  # killed: the kernel freed the lock
        batch.check()
    batch.release()
    retry, _ = hold()  # a retry of the same run id took the lock: the old try's batch is not its holder
    try:
        with pytest.raises(WriterGone, match="no longer holds"):
            batch.check()
        batch.release()
    finally:
        stop(retry)


def test_a_new_holder_waits_for_a_batch_still_committing(lake):
    first, token = hold()
    batch = guard(token, first.pid)
    batch.check()  # the batch passed its check and is committing: it holds the commit lock
    stop(first)  # its run dies mid-commit
    committed = threading.Event()

    def finish_commit() -> None:
        time.sleep(2)
        committed.set()
        batch.release()

    threading.Thread(target=finish_commit).start()
    started = time.monotonic()
    with pipeline_lock("activity", "run-2"):
        assert committed.is_set(), "the next run took the pipeline while a batch of the dead run was committing"
    assert time.monotonic() - started >= 1.5
    assert run_guard._commit_lock is None


def test_a_run_refuses_at_once_when_no_engine_answers(lake):
    from millpond.driver.connect_server import EngineError
    from millpond.driver.session import connect_session

    credential = uuid.uuid4().hex
    started = time.monotonic()
    with pytest.raises(EngineError, match="no engine answers at SPARK_REMOTE sc://localhost:1/") as refused:
        connect_session(f"sc://localhost:1/;token={credential}")
    assert time.monotonic() - started < 10
    assert credential not in str(refused.value)


def test_a_server_without_a_token_is_refused_outside_a_container(lake):
    from millpond import cli

    assert cli.main(["engine", "start", "--no-token"]) == 2
    assert not paths.system_path("engine").exists()  # nothing started


LEASE_URL = "s3a://bucket/lake/_system/locks/activity.lease"


def lease_as_stored(**changes) -> lease.Observed:
    """The run's lease as the store returns it, renewed a second ago, with `changes` to its record."""
    record = lease.LeaseRecord(
        "activity", 3, lease.HELD, "run-1", 4242, "host-a", "2026-01-01T00:00:00+00:00", 60.0, "n"
    )
    return lease.Observed(dataclasses.replace(record, **changes), '"etag"', 1.0)


@pytest.mark.parametrize(
    "holder", [{"run_id": "run-2"}, {"pid": 4343}, {"holding": "another-taking"}], ids=["run", "process", "taking"]
)
def test_a_lease_of_the_runs_generation_held_by_another_holder_stops_the_commit(lake, monkeypatch, holder):
    """A lease object deleted and taken anew counts generations from 1 again, and anyone who can write the bucket
    can write a record with the run's generation: the generation alone does not make the record the run's."""
    batch = RunGuard("", "", "activity.g3.mine", "run-1", 4242, LEASE_URL, 3, "activity")
    if "holding" in holder:
        batch = dataclasses.replace(batch, holding="mine")
    mine = {"holding": "mine"} if "holding" in holder else {}
    monkeypatch.setattr(lease, "observe", lambda url: lease_as_stored(**mine))
    batch.check()  # its own holder: it may commit
    batch.release()
    monkeypatch.setattr(lease, "observe", lambda url: lease_as_stored(**{**mine, **holder}))
    with pytest.raises(WriterGone, match="no longer holds its lease .* generation 3"):
        batch.check()
    batch.release()
