"""The progress listener's end of a run: it lets its queries' last events arrive before it is removed."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from millpond.driver.progress import ProgressListener

pytestmark = pytest.mark.unit


def test_the_listener_waits_for_each_started_query_s_end_and_no_longer_than_its_bound():
    """Removing a Spark Connect listener while a query's terminated event is on its way deadlocks pyspark, so the
    run's end waits for that event; a query that never reports its end costs only the bound."""
    listener = ProgressListener({})
    listener.onQueryStarted(SimpleNamespace(runId="late"))
    ends = threading.Timer(0.3, listener.onQueryTerminated, [SimpleNamespace(runId="late")])
    started = time.monotonic()
    ends.start()
    listener.await_ends(10.0)
    assert 0.25 <= time.monotonic() - started < 5.0  # returned when the event came, not at the bound
    listener.onQueryStarted(SimpleNamespace(runId="never"))
    started = time.monotonic()
    listener.await_ends(0.5)
    assert 0.45 <= time.monotonic() - started < 5.0
