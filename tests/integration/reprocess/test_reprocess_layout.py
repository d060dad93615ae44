"""A source with a landing `layout`: a reprocess reads only its interval's folders and replaces their files whole,
and the rest stays as it was."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from millpond.dev.sample_data import SECONDS_PER_FILE, activity_files
from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference, read
from tests.support.redelivery import move_event_time
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

FILES_PER_HOUR = 3600 // SECONDS_PER_FILE
GOLD = ("gold.device_counts", "gold.activity_hourly")
TABLES = ("bronze.activity", "silver.activity", *GOLD)


def land_hour(landing: Path, hour: int, seed: int) -> None:
    folder = landing / "date=2026-11-01" / f"hour={hour:02d}"
    activity_files(
        folder, FILES_PER_HOUR, 40, duplicates=0.05, malformed=0.03, seed=seed, start_index=hour * FILES_PER_HOUR
    )


def test_a_reprocess_reads_only_the_interval_folders_of_its_layout(spark, lake, tmp_path, capsys):
    """A re-delivered file of the interval's folders is replaced whole: a row its corrected times move out of the
    interval (into hour 0) or into it (from hour 0, misdated at first) is left nowhere twice and lost nowhere; a row
    moved into an hour silver's watermark has not closed refuses the reprocess, while an unchanged row of that hour in a
    re-read file does not. Also: gold, read one file per batch, is rebuilt in one commit, so readers never see partial
    totals."""
    spec = (REPO / "pipelines" / "activity.yaml").read_text()
    spec = spec.replace("event_time: Recorded_At", "event_time: Recorded_At\n    layout: date=YYYY-MM-DD/hour=HH")
    spec = spec.replace(
        "output_mode: complete\n", "output_mode: complete\n    rate_limit: {max_files_per_trigger: 1}\n"
    )
    assert "layout:" in spec and spec.count("max_files_per_trigger: 1}") == 2
    path = tmp_path / "activity.yaml"
    path.write_text(spec)
    landing = lake / "landing" / "activity"
    for hour in range(4):
        land_hour(landing, hour, seed=hour)
    first, second, *_, last = sorted((landing / "date=2026-11-01" / "hour=01").glob("*.json"))
    move_event_time(first, 0, "2026-11-01T00:30:00.000Z")  # misdated: a row of hour 0 in hour 1's folder
    move_event_time(last, 0, "2026-11-01T03:10:00.000Z")  # a row of hour 3, which silver keeps open
    unchanged = last.read_text()
    assert runner.main([str(path), "--run-id", "first"]) == 0
    assert_matches_reference(spark, activity_reference(landing, recursive=True))
    hour_0 = "Recorded_At < '2026-11-01 01:00:00' AND _source_file LIKE '%hour=00%'"
    rows_of_hour_0 = sorted(map(str, read(spark, "bronze.activity").where(hour_0).collect()))

    land_hour(landing, 1, seed=11)  # hour 1 corrected, same names: the misdated row is back in hour 1
    last.write_text(unchanged)  # but for its last file: its row of hour 3, unchanged, asks nothing of hour 3
    move_event_time(first, 1, "2026-11-01T00:40:00.000Z")  # and another row of the file corrected into hour 0
    was = move_event_time(second, 0, "2026-11-01T03:30:00.000Z")  # and one into hour 3, which silver keeps open
    versions = {t: latest_version(paths.table_path(t)) for t in TABLES}
    capsys.readouterr()
    assert runner.main([str(path), "--reprocess", "2026-11-01T01:00:00Z/2026-11-01T02:00:00Z"]) == 2
    refused = capsys.readouterr().err
    assert "the files re-read changed rows of intervals up to 2026-11-01T04:00:00Z" in refused, refused
    assert {t: latest_version(paths.table_path(t)) for t in TABLES} == versions

    second.write_text(was)  # the producer takes that one back
    gold = {t: latest_version(paths.table_path(t)) for t in GOLD}
    assert runner.main([str(path), "--reprocess", "2026-11-01T01:00:00Z/2026-11-01T02:00:00Z"]) == 0
    assert len(spark.read.format("delta").load(str(paths.table_path("silver.activity"))).inputFiles()) >= 2
    assert {t: latest_version(paths.table_path(t)) for t in GOLD} == {t: v + 1 for t, v in gold.items()}
    said = capsys.readouterr().out
    assert re.search(r"bronze.activity: reprocessed .*: \d+ row\(s\) replaced by \d+ from 12 file\(s\)", said), said
    assert "rebuild those as well: 2026-11-01T00:00:00Z/2026-11-01T01:00:00Z" in said, said
    assert "2026-11-01T03:00:00Z/2026-11-01T04:00:00Z" not in said, said
    assert_matches_reference(spark, activity_reference(landing, recursive=True))
    assert sorted(map(str, read(spark, "bronze.activity").where(hour_0).collect())) == rows_of_hour_0
