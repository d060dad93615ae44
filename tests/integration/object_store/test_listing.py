"""The no-JVM listing the no-new-data check fingerprints (millpond.lake.storage.listing): an object-store landing
folder lists as the same folder on disk does, by the same hiding rule."""

from __future__ import annotations

import pytest

from millpond.lake.object_store import S3Path
from millpond.lake.storage import listing

pytestmark = pytest.mark.integration

LANDED = {
    "2026/01/01/a.json": b'{"id": 1}\n',
    "2026/01/02/b.json": b'{"id": 2}\n{"id": 3}\n',
    "c.json": b"",
    "_spark_metadata/0": b"v1",  # hidden, as Spark hides it
    "2026/.tmp/d.json": b"partial",  # hidden folder
    ".e.json.crc": b"x",
}


def test_an_s3_landing_folder_lists_as_the_same_folder_on_disk_would(s3_bucket, tmp_path):
    s3 = s3_bucket.client()
    for name, body in LANDED.items():
        s3.put_object(Bucket=s3_bucket.name, Key=f"landing/events/{name}", Body=body)
        local = tmp_path / "events" / name
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(body)
    s3.put_object(Bucket=s3_bucket.name, Key="landing/events-other/x.json", Body=b"{}")  # a sibling prefix: not ours
    s3.put_object(Bucket=s3_bucket.name, Key="landing/events/2026/empty-dir/", Body=b"")  # a directory marker

    listed = listing(S3Path(s3_bucket.location("landing/events")))
    assert [(name, size) for name, size, _ in listed] == [(n, s) for n, s, _ in listing(tmp_path / "events")]
    assert [name for name, _, _ in listed] == ["2026/01/01/a.json", "2026/01/02/b.json", "c.json"]
    assert all(mtime > 0 for _, _, mtime in listed)
    assert listing(S3Path(s3_bucket.location("landing/nothing-here"))) == []
