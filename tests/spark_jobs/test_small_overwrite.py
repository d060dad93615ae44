"""Complete-mode results overwritten by delta-rs: Spark reads back exactly the rows it handed over, and a table
delta-rs would not write as Spark does goes through Spark."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from millpond import small_overwrite
from millpond.delta_log import committed_batch, latest_version, rows_added

pytestmark = pytest.mark.integration

SCHEMA = ("hour TIMESTAMP, day DATE, device STRING, n BIGINT, share DOUBLE, amount DECIMAL(12,2), ok BOOLEAN, "
          "tags ARRAY<STRING>, span STRUCT<start: TIMESTAMP, end: TIMESTAMP>, counts MAP<STRING, INT>")  # fmt: skip


def rows(n: int, offset: int = 0) -> list[tuple]:
    hour = datetime(2026, 11, 1, tzinfo=UTC)
    return [(hour.replace(hour=i % 24), date(2026, 11, 1 + i % 28), f"d{i + offset}", i + offset, i / 7,
             Decimal(i) / 4, i % 2 == 0, [f"t{i}", None], (hour, hour.replace(hour=1)), {"a": i})
            for i in range(n)]  # fmt: skip


def sorted_rows(df) -> list:
    return sorted(map(repr, df.collect()))


def test_an_overwrite_by_delta_rs_reads_back_in_spark_as_the_batch_it_was_given(spark, tmp_path):
    path = tmp_path / "gold"
    spark.createDataFrame(rows(5), SCHEMA).write.format("delta").option("txnAppId", "app") \
        .option("txnVersion", 0).save(str(path))  # the first write creates the table through Spark  # fmt: skip
    batch = spark.createDataFrame(rows(40, offset=100), SCHEMA)

    table = small_overwrite.table_to_overwrite(path, batch.schema.jsonValue())
    assert table is not None and small_overwrite.committed_batch(table, "app") == 0
    small_overwrite.overwrite(table, batch.toArrow(), "app", 1)

    assert sorted_rows(spark.read.format("delta").load(str(path))) == sorted_rows(batch)
    assert spark.read.format("delta").load(str(path)).schema == spark.read.format("delta").option(
        "versionAsOf", 0).load(str(path)).schema  # the table's schema is untouched  # fmt: skip
    assert rows_added(path, 0, 1, newest_only=True) == 40  # what the run's event log reports as written
    newest = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("version = 1").first()
    assert json.loads(newest.userMetadata) == {"txnAppId": "app", "txnVersion": 1}
    assert committed_batch(path, "app") == 1  # millpond's marker
    # Delta's own txn action: delta-spark skips a write of batch 1 under the same app id.
    batch.write.format("delta").mode("overwrite").option("txnAppId", "app").option("txnVersion", 1).save(str(path))
    assert latest_version(path) == 1


def test_a_checkpoint_every_ten_commits_as_spark_would_make(spark, tmp_path):
    path = tmp_path / "gold"
    spark.createDataFrame(rows(3), SCHEMA).write.format("delta").save(str(path))
    for batch_id in range(1, 12):
        batch = spark.createDataFrame(rows(3 + batch_id), SCHEMA)
        small_overwrite.overwrite(small_overwrite.table_to_overwrite(path, batch.schema.jsonValue()),
                                  batch.toArrow(), "app", batch_id)  # fmt: skip
    assert (path / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == 10
    assert spark.read.format("delta").load(str(path)).count() == 14
    assert spark.read.format("delta").option("versionAsOf", 5).load(str(path)).count() == 8


def test_an_empty_result_empties_the_table(spark, tmp_path):
    path = tmp_path / "gold"
    spark.createDataFrame(rows(3), SCHEMA).write.format("delta").save(str(path))
    empty = spark.createDataFrame([], SCHEMA)
    small_overwrite.overwrite(small_overwrite.table_to_overwrite(path, empty.schema.jsonValue()), empty.toArrow(),
                              "app", 1)  # fmt: skip
    assert spark.read.format("delta").load(str(path)).count() == 0
    assert latest_version(path) == 1


@pytest.mark.parametrize("change", ["check constraint", "partitioned", "append-only", "new column", "too many rows",
                                    "no row counts", "no table"])  # fmt: skip
def test_tables_delta_rs_would_not_write_as_spark_does_go_through_spark(spark, tmp_path, monkeypatch, change):
    path, batch = tmp_path / "gold", spark.createDataFrame(rows(5), SCHEMA)
    if change != "no table":
        writer = batch.write.format("delta")
        spark.conf.set("spark.databricks.delta.stats.collect", str(change != "no row counts").lower())
        try:
            (writer.partitionBy("device") if change == "partitioned" else writer).save(str(path))
        finally:
            spark.conf.unset("spark.databricks.delta.stats.collect")
    if change == "check constraint":  # a writer-version-3 feature
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT positive CHECK (n >= 0)")
    if change == "append-only":
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'true')")
    if change == "new column":
        batch = batch.selectExpr("*", "1 AS added")
    if change == "too many rows":
        monkeypatch.setattr(small_overwrite, "SMALL_ROWS", 4)
    assert small_overwrite.table_to_overwrite(path, batch.schema.jsonValue()) is None
    if change == "too many rows":  # the same table and batch, under the limit
        monkeypatch.setattr(small_overwrite, "SMALL_ROWS", 5)
        assert small_overwrite.table_to_overwrite(path, batch.schema.jsonValue()) is not None
