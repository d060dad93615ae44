"""millpond.lake.delta_log's read of a table's properties without a JVM, on tables delta-rs writes: from the newest
commit that set them, and from a checkpoint once the commits before it are summed up there."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from millpond.lake.delta_log import table_properties

pytestmark = pytest.mark.unit

CHANGE_FEED = "delta.enableChangeDataFeed"


def test_a_table_s_properties_are_its_newest_metadata_s_before_and_after_a_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    assert table_properties(path) == {}  # no table
    write_deltalake(path, pa.table({"a": [1]}))
    assert CHANGE_FEED not in table_properties(path)
    DeltaTable(path).alter.set_table_properties({CHANGE_FEED: "true"})
    assert table_properties(path)[CHANGE_FEED] == "true"
    for value in range(3):
        write_deltalake(path, pa.table({"a": [value]}), mode="append")
    DeltaTable(path).create_checkpoint()  # the commits after it hold no metaData: the checkpoint's is read
    assert table_properties(path)[CHANGE_FEED] == "true"
    DeltaTable(path).alter.set_table_properties({CHANGE_FEED: "false"})
    assert table_properties(path)[CHANGE_FEED] == "false"
