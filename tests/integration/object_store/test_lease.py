"""The pipeline lease on a real S3 server (s3proxy): one writer per pipeline across machines.

"Machines" are processes that share nothing local: each runs with its own working folder, temp folder and home, so
nothing but the object store can tell them about each other (a local `flock` could not).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from millpond.lake import lease as lease_module
from millpond.lake.lease import LeaseLost, LeaseRecord, PipelineLease, pipeline_lease
from millpond.lake.lock_errors import PipelineBusy
from tests.support import REPO

pytestmark = pytest.mark.integration


def lease(bucket, run_id: str, ttl: float = 30.0, renew: bool = True) -> PipelineLease:
    return PipelineLease(bucket.location("lake"), "activity", run_id, ttl_seconds=ttl, renew=renew)


def stored(bucket) -> LeaseRecord:
    body = bucket.client().get_object(Bucket=bucket.name, Key="lake/_system/locks/activity.lease")["Body"].read()
    record = LeaseRecord.from_json(body)
    assert record is not None
    return record


def test_a_second_writer_is_refused_naming_the_holder(s3_bucket):
    first = lease(s3_bucket, "run-1")
    assert first.acquire() == 1
    try:
        with pytest.raises(PipelineBusy) as refused:
            lease(s3_bucket, "run-2").acquire()
        message = str(refused.value)
        assert "pipeline 'activity' is already running (run run-1 pid" in message
        assert "Fix: wait for it to finish, or pass --wait SECONDS" in message
        assert first.check() == 1  # the refused run did not disturb the holder
    finally:
        first.release()
    assert stored(s3_bucket).state == "released"
    assert s3_bucket.keys("lake/") == ["lake/_system/locks/activity.lease"]


def test_a_released_lease_is_taken_at_once_with_the_next_generation(s3_bucket):
    with pipeline_lease(s3_bucket.location("lake").url, "activity", "run-1", ttl_seconds=30) as first:
        assert first.generation == 1
    started = time.monotonic()
    with pipeline_lease(s3_bucket.location("lake").url, "activity", "run-2", ttl_seconds=30) as second:
        assert second.generation == 2
        assert stored(s3_bucket).run_id == "run-2"
    assert time.monotonic() - started < 5  # no waiting for a lapse


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_commit(s3_bucket):
    stalled = lease(s3_bucket, "run-stalled", ttl=4.0, renew=False)  # a holder that stopped renewing (a long pause)
    assert stalled.acquire() == 1
    with pytest.raises(PipelineBusy):
        lease(s3_bucket, "run-early", ttl=4.0).acquire()  # not lapsed yet
    time.sleep(5.5)  # the store's clock has whole seconds: lapsed for certain
    successor = lease(s3_bucket, "run-next", ttl=30.0)
    assert successor.acquire() == 2
    try:
        with pytest.raises(LeaseLost) as lost:
            stalled.check()
        message = str(lost.value)
        assert "run run-stalled lost its lease" in message and "generation 2, run run-next" in message
        assert "must not commit" in message
        stalled.release()  # must leave the successor's lease alone
        assert stored(s3_bucket).run_id == "run-next" and stored(s3_bucket).state == "held"
        assert successor.check() == 2
    finally:
        successor.release()


def test_a_holder_renews_in_the_background_so_its_lease_does_not_lapse(s3_bucket):
    holder = lease(s3_bucket, "run-long", ttl=5.0)  # renewed every 1.7 s: a loaded machine stalls less than 3 s
    holder.acquire()
    try:
        time.sleep(11)  # more than twice the lease's time, without a check
        with pytest.raises(PipelineBusy):
            lease(s3_bucket, "run-other", ttl=5.0).acquire()
        assert holder.check() == 1
    finally:
        holder.release()


def spawn(bucket, server, tmp_path: Path, name: str, *args: str) -> subprocess.Popen:
    """A run on its own "machine": separate working folder, temp folder and home; only the bucket is shared."""
    home = tmp_path / name
    (home / "tmp").mkdir(parents=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "PYTHONPATH": str(REPO),
        "MILLPOND_PROJECT": str(home),
        **server.env(),
    }
    command = [sys.executable, "-m", "tests.support.lease_holder", "--lake", bucket.location("lake").url]
    return subprocess.Popen(
        [*command, "--pipeline", "activity", "--run-id", name, *args],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def first_event(process: subprocess.Popen) -> dict:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else "no output"
    return json.loads(line)


def test_two_processes_that_share_no_folder_never_hold_the_lease_together(s3_bucket, s3_server, tmp_path):
    # held long enough for the second process to start and ask, even on a loaded machine
    first = spawn(s3_bucket, s3_server, tmp_path, "machine-a", "--hold", "12", "--ttl", "30")
    try:
        assert first_event(first) == {"acquired": 1}
        second = spawn(s3_bucket, s3_server, tmp_path, "machine-b", "--ttl", "30")
        out, err = second.communicate(timeout=60)
        assert second.returncode == 3, err
        assert "already running (run machine-a pid" in json.loads(out)["busy"]
        queued = spawn(s3_bucket, s3_server, tmp_path, "machine-c", "--wait", "60", "--ttl", "30")
        out, err = queued.communicate(timeout=90)
        assert queued.returncode == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        assert events == [{"acquired": 2}, {"released": 2}]
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert [json.loads(line) for line in out.splitlines()][-1] == {"released": 1}
    finally:
        first.kill()


def test_a_killed_holder_blocks_the_next_run_only_until_its_lease_lapses(s3_bucket, s3_server, tmp_path):
    crashed = spawn(s3_bucket, s3_server, tmp_path, "machine-a", "--hold", "600", "--ttl", "3")
    assert first_event(crashed) == {"acquired": 1}
    os.kill(crashed.pid, signal.SIGKILL)
    crashed.wait(timeout=30)
    started = time.monotonic()
    successor = spawn(s3_bucket, s3_server, tmp_path, "machine-b", "--wait", "30", "--ttl", "30")
    out, err = successor.communicate(timeout=90)
    assert successor.returncode == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [{"acquired": 2}, {"released": 2}]
    assert time.monotonic() - started < 15  # it waited for the 3 s lease to lapse, not for a timeout


def test_the_pipeline_lock_on_an_object_store_lake_is_the_lease(s3_bucket, monkeypatch):
    from millpond.lake.lock import pipeline_lock

    monkeypatch.setenv("MILLPOND_LAKE", s3_bucket.location("lake").url)
    with pipeline_lock("activity", "run-1") as held:
        assert isinstance(held, PipelineLease) and held.generation == 1
        assert stored(s3_bucket).run_id == "run-1" and stored(s3_bucket).state == "held"
        with pytest.raises(PipelineBusy, match="already running \\(run run-1 pid"):
            with pipeline_lock("activity", "run-2"):
                pass
        assert held.check() == 1
    assert stored(s3_bucket).state == "released"


def lose_next_reply(holder: PipelineLease) -> list[int]:
    """The holder's next PutObject reaches the store and is written, then its reply is lost (the connection drops):
    botocore's own retry sends it again. Returns the status of every attempt the store answered, as it goes."""
    from botocore.exceptions import ConnectionClosedError

    s3 = holder._s3
    answered: list[int] = []

    def send_then_drop(request, **_):
        response = s3._endpoint.http_session.send(request)
        answered.append(response.status_code)
        if len(answered) == 1:
            raise ConnectionClosedError(endpoint_url=request.url)
        return response

    s3.meta.events.register("before-send.s3.PutObject", send_then_drop)
    return answered


def test_a_renewal_whose_reply_was_lost_keeps_the_lease(s3_bucket):
    holder = lease(s3_bucket, "run-1", renew=False)
    assert holder.acquire() == 1
    answered = lose_next_reply(holder)
    assert holder.check() == 1  # the retry was refused (412): the lease holds our own write, so it is still ours
    assert answered == [200, 412]
    assert holder.check() == 1  # and the version it adopted is the stored one: the next renewal's If-Match holds
    assert answered == [200, 412, 200]
    assert stored(s3_bucket).run_id == "run-1" and stored(s3_bucket).state == "held"
    holder.release()
    assert stored(s3_bucket).state == "released"


def test_an_acquisition_whose_reply_was_lost_takes_the_lease(s3_bucket):
    holder = lease(s3_bucket, "run-1", renew=False)
    answered = lose_next_reply(holder)
    assert holder.acquire() == 1  # created (If-None-Match: *), retried, refused: our record, so the lease is ours
    assert answered == [200, 412]
    with pytest.raises(PipelineBusy):
        lease(s3_bucket, "run-2").acquire()
    assert holder.check() == 1
    holder.release()


def test_two_pipelines_leases_in_one_process_are_fenced_each_on_its_own(s3_bucket):
    lake = s3_bucket.location("lake").url
    with pipeline_lease(lake, "sales", "run-0", ttl_seconds=30):
        pass  # sales's next holder is generation 2, activity's is 1
    assert lease_module.fence() is None  # nothing held
    with (
        pipeline_lease(lake, "activity", "run-a", ttl_seconds=30) as activity,
        pipeline_lease(lake, "sales", "run-s", ttl_seconds=30) as sales,
    ):
        assert (lease_module.fence("activity"), lease_module.fence("sales")) == (1, 2)
        assert lease_module.fence("other") is None
        # Another run takes activity's lease over (as one does once it lapses): only activity's fence fails.
        taken = LeaseRecord("activity", 2, "held", "run-b", 1, "elsewhere", "now", 30.0, "n")
        s3_bucket.client().put_object(Bucket=s3_bucket.name, Key=activity.location.key, Body=taken.to_json())
        with pytest.raises(LeaseLost, match="run run-a lost its lease"):
            lease_module.fence("activity")
        assert lease_module.fence("sales") == 2 and sales.check() == 2
        with pytest.raises(LeaseLost):
            lease_module.fence()  # a caller naming no pipeline checks every lease the process holds
    assert lease_module.fence("sales") is None and lease_module.fence() is None
    assert stored(s3_bucket).run_id == "run-b"  # the lost lease was left to its new holder


def test_an_engine_batch_commits_only_while_its_run_renews_the_lease(s3_bucket, monkeypatch, tmp_path):
    """A run's batch on the engine (millpond.driver.run_guard.RunGuard), played by this process: on an s3a lake
    it commits only while the run's lease carries the run's generation and was renewed lately, and a run taking the
    lease on the engine's machine waits for a batch still committing."""
    from millpond.driver.run_guard import RunGuard, WriterGone, guard_for
    from millpond.lake.lock import pipeline_lock

    monkeypatch.setenv("MILLPOND_LAKE", s3_bucket.location("lake").url)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the engine's local folder
    with pipeline_lock("activity", "run-1") as held:
        assert held is not None
        batch = guard_for("activity", "run-1")
        assert (batch.lease_url, batch.generation) == (held.url, 1) and batch.token.startswith("activity.g1.")
        batch.check()  # held and renewed: it may commit
        batch.release()
    with pytest.raises(WriterGone, match="no longer holds its lease .* it is released by run run-1"):
        batch.check()
    batch.release()

    stalled = lease(s3_bucket, "run-2", ttl=4.0, renew=False)  # a run killed after taking its lease
    assert stalled.acquire() == 2
    late = RunGuard("", "", "activity.g2", "run-2", os.getpid(), stalled.url, 2, "activity")
    late.check()
    late.release()
    time.sleep(3.5)  # more than half the lease's time, by the store's clock (whole seconds)
    with pytest.raises(WriterGone, match="has not renewed its lease .* it is gone"):
        late.check()
    late.release()

    time.sleep(1.5)  # lapsed: the next run may take the lease, but a batch that passed its check still commits
    taker = lease(s3_bucket, "run-3", ttl=30.0)
    assert taker.acquire() == 3
    with pytest.raises(WriterGone, match="no longer holds its lease .* it is held by run run-3"):
        late.check()  # taken over: another generation holds it
    late.release()
    committing = RunGuard("", "", "activity.g3", "run-3", os.getpid(), taker.url, 3, "activity")
    committing.check()  # holds the engine's commit lock until release()
    taker.release()
    finished = threading.Event()

    def finish_commit() -> None:
        time.sleep(2)
        finished.set()
        committing.release()

    threading.Thread(target=finish_commit).start()
    with pipeline_lock("activity", "run-4"):
        assert finished.is_set(), "the next run took the pipeline while a batch of the engine was committing"
