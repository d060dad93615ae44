"""`millpond run --reprocess START/END` with `MILLPOND_LAKE=s3a://...` against a real S3 server, through real
`millpond run` processes: one hour of a `layout` source re-delivered in the bucket (corrected content under the same
names, one file removed, its rows removed as `--allow-missing-files` allows, one added), rebuilt in every table from
the bucket's files as they are now, each then equal to the plain-Python reference over a local copy of those files;
the other hour's rows untouched. That the same
reprocess again changes nothing is tested on a folder lake without a layout (test_reprocess_cli.py), not here.

Tables are read back by delta-rs (tests/support/lake_tables.py): the runs are the only JVMs.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files
from millpond.lake import pending_reprocess
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference_rs, read_rs
from tests.support.reference import activity_reference
from tests.support.stress import MILLPOND

pytestmark = pytest.mark.integration

HOUR_0 = "2026-11-01T00:00:00Z/2026-11-01T01:00:00Z"
FILES = 4  # per hour: hour 0 and hour 2 (silver's watermark, an hour behind hour 2's rows, then closes hour 0)
SLICED = ("bronze.activity", "silver.activity")


def folder(hour: int) -> str:
    return f"date=2026-11-01/hour={hour:02d}"


def land(bucket, landing: Path, hour: int, seed: int, files: int = FILES, first: int = 0) -> None:
    """Files of one hour made in the local copy (the reference reads it), then put into the bucket by boto3."""
    made = activity_files(
        landing / folder(hour), files, 15, duplicates=0.1, malformed=0.05, seed=seed, start_index=hour * 12 + first
    )
    bucket.put_files(made, "lake/landing/activity", root=landing)


def run(spec: Path, *args: str) -> str:
    proc = subprocess.run(
        [MILLPOND, "run", str(spec), "--wait", "60", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out


def rows(table: str, hour: int | None = None) -> list[str]:
    """A table's rows (without `_ingested_at`, which a reprocess sets anew), or those of one event-time hour."""
    found = read_rs(table).drop_columns(["_ingested_at"]).to_pylist()
    if hour is not None:
        found = [r for r in found if r["Recorded_At"] is not None and r["Recorded_At"].hour == hour]
    return sorted(map(str, found))


def test_a_redelivered_hour_in_the_bucket_is_rebuilt_and_the_other_hour_is_untouched(s3_bucket, monkeypatch, tmp_path):
    monkeypatch.setenv("MILLPOND_LAKE", f"s3a://{s3_bucket.name}/lake")
    spec = tmp_path / "activity.yaml"
    text = (REPO / "pipelines" / "activity.yaml").read_text()
    spec.write_text(
        text.replace("event_time: Recorded_At", "event_time: Recorded_At\n    layout: date=YYYY-MM-DD/hour=HH")
    )
    landing = tmp_path / "landing"
    land(s3_bucket, landing, 0, seed=1)
    land(s3_bucket, landing, 2, seed=2)
    run(spec, "--run-id", "first")
    assert_matches_reference_rs(activity_reference(landing, recursive=True))
    hour_2 = {t: rows(t, 2) for t in SLICED}
    assert all(hour_2.values())

    # Hour 0 corrected in the bucket: the same names with other content, one file removed, one added.
    land(s3_bucket, landing, 0, seed=11)
    removed = landing / folder(0) / "activity-000003.json"
    removed.unlink()
    s3_bucket.client().delete_object(Bucket=s3_bucket.name, Key=f"lake/landing/activity/{folder(0)}/{removed.name}")
    land(s3_bucket, landing, 0, seed=12, files=1, first=FILES)
    said = run(spec, "--reprocess", HOUR_0, "--allow-missing-files", "--run-id", "reprocess")
    assert re.search(r"removes the \d+ row\(s\) of 1 file\(s\) no longer in landing.*activity-000003\.json", said), said
    # The stream read the added file once; the slice read the hour's 4 files in the bucket (3 corrected, 1 new).
    assert re.search(r"bronze\.activity: reprocessed \S+: \d+ row\(s\) replaced by \d+ from 4 file\(s\)", said), said
    assert_matches_reference_rs(activity_reference(landing, recursive=True))
    assert {t: rows(t, 2) for t in SLICED} == hour_2
    assert not pending_reprocess.pending("activity")
