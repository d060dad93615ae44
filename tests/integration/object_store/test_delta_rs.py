"""delta-rs (the no-JVM commits: event log, system tables, small overwrites) on a real S3 server, with the storage
options millpond gives it: commits are conditional PUTs, so a writer with a stale view never overwrites a commit."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from millpond.lake.object_store import delta_rs_options

pytestmark = pytest.mark.integration


def test_a_stale_writer_commits_after_the_other_one_instead_of_over_it(s3_bucket):
    options = delta_rs_options()
    uri = f"s3://{s3_bucket.name}/lake/_system/event_log"
    write_deltalake(uri, pa.table({"run": ["r0"]}), storage_options=options)
    stale = DeltaTable(uri, storage_options=options)  # sees version 0
    write_deltalake(uri, pa.table({"run": ["r1"]}), mode="append", storage_options=options)  # version 1
    write_deltalake(stale, pa.table({"run": ["r2"]}), mode="append")  # would be version 1 again: must become 2
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["run"].to_pylist()) == ["r0", "r1", "r2"]
    assert [
        k.rsplit("/", 1)[1] for k in s3_bucket.keys("lake/_system/event_log/_delta_log/") if k.endswith(".json")
    ] == [f"{v:020d}.json" for v in range(3)]
