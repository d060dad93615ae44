"""The lake's own modules (no JVM) on an `s3a://` lake against a real S3 server: the same calls a local lake
takes, reaching the bucket through S3Path (millpond.lake.object_store) and delta-rs's storage options."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from millpond.lake import delta_log, paths, pending_reprocess, system_tables
from millpond.lake.checkpoints import landed_files, log_files
from millpond.lake.object_store import S3Path
from millpond.runs import reports, run_summary

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_lake(s3_bucket, monkeypatch):
    monkeypatch.setenv("MILLPOND_LAKE", f"s3a://{s3_bucket.name}/lake")
    return s3_bucket


def test_paths_read_write_and_list_in_the_bucket(s3_lake):
    root = paths.lake_root()
    assert isinstance(root, S3Path) and str(root) == f"s3a://{s3_lake.name}/lake"
    offsets = paths.checkpoint_path("activity", "bronze.activity") / "offsets"
    assert log_files(offsets) == [] and not offsets.is_dir() and not offsets.exists()
    for batch in (0, 1, 10, 2):
        paths.write_atomically(offsets / str(batch), f'v1\n{{}}\n{{"batch": {batch}}}\n')
    (offsets / ".2.crc").write_text("x")  # hidden, as Spark writes them beside each entry
    assert [p.name for p in log_files(offsets)] == ["0", "1", "2", "10"]
    assert offsets.is_dir() and (offsets / "10").is_file() and not (offsets / "3").exists()
    assert json.loads((offsets / "10").read_text().splitlines()[2]) == {"batch": 10}
    with pytest.raises(FileNotFoundError):
        (offsets / "3").read_text()
    assert (offsets / "1").stat().st_size == len('v1\n{}\n{"batch": 1}\n')
    paths.remove_tree(offsets.parent)
    assert s3_lake.keys("lake/_checkpoints/") == [] or all(k.endswith("/") for k in s3_lake.keys("lake/_checkpoints/"))
    assert log_files(offsets) == []

    s3_lake.client().put_object(Bucket=s3_lake.name, Key="lake/landing/activity/a.json", Body=b"{}\n")
    assert [name for name, _, _ in landed_files(paths.landing_path("landing/activity"))] == ["a.json"]


def test_system_tables_run_summaries_and_reports_land_in_the_bucket(s3_lake):
    columns = (("run_id", "string"), ("n", "bigint"))
    event_log = paths.event_log_path()
    assert system_tables.append(event_log, columns, [{"run_id": "r1", "n": 1}]) == 0
    assert system_tables.append(event_log, columns, [{"run_id": "r2", "n": 2}], app_id="a", batch_id=7) == 1
    state = delta_log.table_state(event_log)
    assert state is not None and (state.version, state.rows) == (1, 2)
    assert delta_log.latest_version(str(event_log)) == 1
    assert delta_log.committed_batch_in(event_log, 0, "a", 7)
    commits = [k for k in s3_lake.keys("lake/_system/event_log/_delta_log/") if k.endswith(".json")]
    assert commits == [f"lake/_system/event_log/_delta_log/{v:020d}.json" for v in (0, 1)]

    tables = [{"table": "bronze.activity", "outcome": "succeeded"}]
    summary = run_summary.merge("activity", "run-1", "manual", tables)
    assert str(summary).startswith(f"s3a://{s3_lake.name}/lake/_system/runs/activity/")
    assert run_summary.load("activity", "run-1")["tables"] == tables
    assert run_summary.latest("activity")["run_id"] == "run-1"

    pending_reprocess.begin("activity", "A/B", ["silver.activity"])
    assert pending_reprocess.owed("activity") == {"silver.activity"}
    pending_reprocess.done("activity", "A/B", "silver.activity")
    assert pending_reprocess.pending("activity") == []

    entry = {
        "pipeline": "activity",
        "table": "silver.activity",
        "suite": "activity_silver",
        "run_id": "run-1",
        "batch_id": 0,
        "mode": "run",
        "outcome": "passed",
        "element_count": 3,
        "validated_at": datetime.now(UTC).isoformat(),
        "expectations": [],
        "report_path": None,
    }
    index = reports.record(entry)
    reports.record(entry | {"batch_id": 1})
    assert str(index) == f"s3a://{s3_lake.name}/lake/_reports/index.html"
    assert [e["batch_id"] for e in reports.history()] == [0, 1]
    assert "silver.activity" in index.read_text()
