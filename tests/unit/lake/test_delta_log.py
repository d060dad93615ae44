"""millpond.lake.delta_log's read of a table's properties without a JVM, on tables delta-rs writes: from the newest
commit that set them, from a checkpoint once the commits before it are summed up there, and unknown (None) where the
log keeps them in a form it does not read."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from millpond.driver import sources
from millpond.lake.delta_log import change_feed_on, column_comments, table_properties
from millpond.spec import load_pipeline
from tests.support.cdc_reference import delta_source_spec

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


def test_a_table_s_column_comments_are_its_newest_schema_s_before_and_after_a_checkpoint(tmp_path):
    """What the idle run reads to tell whether a spec's column description is missing (millpond.driver.
    column_comments), without a JVM: the comments of the newest schema, from a commit or a checkpoint."""
    path = str(tmp_path / "t")
    assert column_comments(path) == {}  # no table
    write_deltalake(path, pa.table({"a": [1], "b": ["x"]}))
    assert column_comments(path) == {"a": None, "b": None}
    DeltaTable(path).alter.set_column_metadata("a", {"comment": "The a's."})
    for value in range(3):
        write_deltalake(path, pa.table({"a": [value], "b": ["y"]}), mode="append")
    DeltaTable(path).create_checkpoint()
    assert column_comments(path) == {"a": "The a's.", "b": None}
    DeltaTable(path).alter.set_column_metadata("b", {"comment": "A b."})
    assert column_comments(path) == {"a": "The a's.", "b": "A b."}


def test_properties_kept_where_this_reader_does_not_look_are_unknown_and_stop_no_run(tmp_path, monkeypatch):
    """A checkpoint in a form the reader skips (here: its parquet gone, as a v2 checkpoint's `.json` would be) leaves
    the properties unknown: not "off", so another job's table is not refused on a guess (Spark's read decides)."""
    lake = tmp_path / "lake"
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    path = lake / "crm" / "customers"
    write_deltalake(str(path), pa.table({"id": [1]}), configuration={CHANGE_FEED: "true"})
    write_deltalake(str(path), pa.table({"id": [2]}), mode="append")
    DeltaTable(str(path)).create_checkpoint()
    for part in (path / "_delta_log").glob("*.checkpoint*.parquet"):
        part.rename(part.with_name(part.name.replace(".parquet", ".elsewhere")))
    assert table_properties(path) is None and change_feed_on(path) is None
    pipeline = load_pipeline(delta_source_spec(tmp_path, cdc={"change_feed": True, "keys": ["id"]}), lake_root=lake)
    sources.enable_change_feed_upstream(None, pipeline, pipeline.tables["silver.crm_mirror"])  # neither refused
