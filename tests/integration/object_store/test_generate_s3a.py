"""`millpond generate` with `MILLPOND_LAKE=s3a://...` against a real S3 server: the sample files land in the
bucket's landing prefix, byte for byte what the same command lands in a folder lake, and a second call adds files
numbered after the ones there without touching them."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond import cli

pytestmark = pytest.mark.integration

ACTIVITY = "lake/landing/activity/"


def generate(*args: str) -> None:
    assert cli.main(["generate", *args]) == 0


def bodies(bucket, prefix: str) -> dict[str, bytes]:
    s3 = bucket.client()
    return {
        key[len(prefix) :]: s3.get_object(Bucket=bucket.name, Key=key)["Body"].read() for key in bucket.keys(prefix)
    }


def in_folder(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if not p.name.startswith(".")}


def test_generated_samples_land_in_the_bucket_as_in_a_folder_lake(s3_bucket, monkeypatch, tmp_path, capsys):
    folder_lake = tmp_path / "lake"
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    monkeypatch.setenv("MILLPOND_LAKE", str(folder_lake))
    generate("activity", "--files", "2", "--rows", "50", "--malformed", "0.1", "--seed", "3")
    generate("activity", "--files", "1", "--rows", "50", "--seed", "4")
    generate("clicks", "--files", "1", "--rows", "40", "--seed", "5")

    monkeypatch.setenv("MILLPOND_LAKE", f"s3a://{s3_bucket.name}/lake")
    generate("activity", "--files", "2", "--rows", "50", "--malformed", "0.1", "--seed", "3")
    assert f"landed 2 files x 50 lines in s3a://{s3_bucket.name}/{ACTIVITY.rstrip('/')}" in capsys.readouterr().out
    first = bodies(s3_bucket, ACTIVITY)
    assert sorted(first) == ["activity-000000.json", "activity-000001.json"]
    generate("activity", "--files", "1", "--rows", "50", "--seed", "4")  # numbered after the two there
    landed = bodies(s3_bucket, ACTIVITY)
    assert {name: landed[name] for name in first} == first
    assert landed == in_folder(folder_lake / "landing" / "activity")

    generate("clicks", "--files", "1", "--rows", "40", "--seed", "5")
    for source in ("impressions", "clicks", "campaigns"):
        assert bodies(s3_bucket, f"lake/landing/{source}/") == in_folder(folder_lake / "landing" / source), source
    s3 = s3_bucket.client()
    s3.put_object(Bucket=s3_bucket.name, Key="lake/landing/campaigns/campaigns.csv", Body=b"ad_id,campaign\n")
    generate("clicks", "--files", "1", "--rows", "40", "--seed", "6")  # the user's edited dimension is kept
    assert bodies(s3_bucket, "lake/landing/campaigns/") == {"campaigns.csv": b"ad_id,campaign\n"}
    assert sorted(bodies(s3_bucket, "lake/landing/impressions/")) == [
        "impressions-000000.json",
        "impressions-000001.json",
    ]
