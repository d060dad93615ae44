"""The runner's checks that stop a run before any JVM starts (the runs themselves: tests/integration/pipelines/)."""

from __future__ import annotations

import pytest

from millpond.driver import runner

pytestmark = pytest.mark.unit


def test_without_a_broker_address_a_run_stops_before_spark_naming_the_variable(lake, monkeypatch, capsys):
    """`make demo` and `make up` set no Kafka address: the spec still loads, and a run says what is missing."""
    monkeypatch.delenv("MILLPOND_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    assert runner.main(["device_status"]) == 2
    err = capsys.readouterr().err
    assert "sources.device_events.bootstrap_servers: environment variable MILLPOND_KAFKA_BOOTSTRAP is not set" in err
    assert "Fix: export MILLPOND_KAFKA_BOOTSTRAP=host:port" in err
    assert not (lake / "_system").exists()  # before the lock: nothing written


def test_a_run_queued_behind_another_reads_the_pending_reprocess_as_that_run_left_it(lake, monkeypatch, capsys):
    """The pending-reprocess record is the lock holder's to change: a run waiting for the lock (--wait) must decide
    what it owes only once it holds the lock. Here the holder leaves an unfinished reprocess of gold behind; the
    queued run has to finish it first, where a run that read the record before queueing saw nothing owed and kept
    gold stale."""
    import threading

    from millpond.lake import lock, pending_reprocess

    hour = "2026-11-01T02:00:00Z/2026-11-01T03:00:00Z"
    queued = threading.Event()
    flock_within = lock.flock_within

    def waiting(handle, wait_seconds, poll_seconds):
        queued.set()  # the queued run asks for the lock the holder has
        return flock_within(handle, wait_seconds, poll_seconds)

    codes: list[int] = []
    with lock.pipeline_lock("activity", "holder"):
        monkeypatch.setattr(lock, "flock_within", waiting)
        queued_run = threading.Thread(
            target=lambda: codes.append(runner.main(["activity", "--wait", "60"], spark_allowed=False))
        )
        queued_run.start()
        assert queued.wait(60), "the queued run never asked for the lock"
        pending_reprocess.begin("activity", hour, ["gold.device_counts"])  # the holder stops short of gold
    queued_run.join(60)
    assert codes == [runner.NEEDS_SPARK]  # it owes gold's rebuild, so it needs Spark, not an idle run
    assert f"finishing the reprocess of {hour} for gold.device_counts first" in capsys.readouterr().out


def test_a_gold_only_run_leaves_a_reprocess_its_upstream_still_owes_to_the_run_that_replaces_that_slice(lake, capsys):
    """Silver still owes the hour (its reprocess stopped): gold rebuilt now would read silver's old rows and be
    struck off. Gold's own run drains as usual and finishes nothing; it is rebuilt once silver's slice lands."""
    from millpond.lake import pending_reprocess

    hour = "2026-11-01T02:00:00Z/2026-11-01T03:00:00Z"
    pending_reprocess.begin("activity", hour, ["silver.activity", "gold.device_counts", "gold.activity_hourly"])
    pending_reprocess.begin("activity", "2026-11-01T05:00:00Z/2026-11-01T06:00:00Z", ["gold.device_counts"])
    assert runner.main(["activity", "--layers", "gold"], spark_allowed=False) == runner.NEEDS_SPARK
    said = capsys.readouterr().out
    assert "finishing the reprocess of 2026-11-01T05:00:00Z/2026-11-01T06:00:00Z for gold.device_counts" in said
    assert hour not in said
    assert runner.unfinished_reprocess(runner.load_pipeline("activity"), ["gold.device_counts"]).interval.text != hour
