"""When a pipeline's lease counts as free, read from the record and the store's own clock (no server needed; the
lease against a real one is tests/integration/object_store/test_lease.py)."""

from __future__ import annotations

import pytest

from millpond.lake.lease import HELD, RELEASED, LeaseRecord, Observed

pytestmark = pytest.mark.unit


def record(state: str = HELD, ttl: float = 60.0) -> LeaseRecord:
    return LeaseRecord("activity", 3, state, "run-1", 42, "host-a", "2026-01-01T00:00:00+00:00", ttl, "n")


def test_a_record_reads_back_as_written_and_names_its_holder():
    assert LeaseRecord.from_json(record().to_json()) == record()
    assert record().holder() == "run run-1 pid 42 on host-a since 2026-01-01T00:00:00+00:00"


def test_a_record_written_before_the_taking_id_was_kept_still_reads():
    """Read as no record, a live lease would count as free and its generation start again from 1."""
    import json

    old = {k: v for k, v in json.loads(record().to_json()).items() if k != "holding"}
    assert LeaseRecord.from_json(json.dumps(old).encode()) == record()
    assert LeaseRecord.from_json(record().to_json()).holding == ""


@pytest.mark.parametrize("body", [b"", b"not json", b"{}", b'{"pipeline": "activity"}'])
def test_an_object_millpond_did_not_write_counts_as_no_record(body):
    assert LeaseRecord.from_json(body) is None
    assert Observed(None, '"etag"', 0.0).free()


def test_a_lease_is_free_once_released_or_older_than_its_time_by_the_stores_clock():
    assert not Observed(record(ttl=60), '"e"', 59.0).free()
    assert Observed(record(ttl=60), '"e"', 60.0).free()
    assert Observed(record(RELEASED, ttl=60), '"e"', 0.0).free()


def test_the_commit_fence_checks_nothing_on_a_local_lake(monkeypatch, tmp_path):
    from millpond.lake import lease
    from millpond.lake.lock import pipeline_lock

    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    with pipeline_lock("activity", "run-1") as held:
        assert held is None and lease.fence() is None  # the flock cannot be lost: no request, no error
