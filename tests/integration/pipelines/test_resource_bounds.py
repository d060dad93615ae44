"""State stays bounded while history grows: silver's dedup state holds only what the watermark can still match.

Peak memory over 10x history is measured by `make bench` (B7) and reported by `make stress`; this test checks the
mechanism that bounds it, with the number a user reads in the event log (state_rows).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration


def test_dedup_state_holds_only_the_last_watermark_delay_of_keys(spark, lake):
    landing = lake / "landing" / "activity"
    for run in range(3):  # three hours of recordings, an hour per run (12 files of 5 minutes)
        activity_files(landing, 12, 40, duplicates=0.05, seed=100 + run)
        assert runner.main(["activity", "--run-id", f"hour-{run}"]) == 0

    reference = activity_reference(landing)
    times = [datetime.fromisoformat(key[2].replace("Z", "+00:00")) for key in reference.silver]
    watermark = max(times) - timedelta(hours=1)  # silver: watermark Recorded_At, delay 1 hour
    still_matchable = sum(t > watermark for t in times)

    log = spark.read.format("delta").load(str(paths.event_log_path()))
    state_rows = log.where((log.run_id == "hour-2") & (log.table == "silver.activity")).first().state_rows
    assert state_rows == still_matchable
    assert state_rows < len(reference.silver) / 2  # three hours landed, about one kept
