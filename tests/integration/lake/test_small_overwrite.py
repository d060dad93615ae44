"""Complete-mode results overwritten by delta-rs: Spark reads back exactly the rows it handed over, the commit carries
Delta's `txn` action, and a table delta-rs would not write as Spark does goes through Spark."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from millpond.lake import paths, small_overwrite
from millpond.lake.delta_log import latest_version, rows_added
from tests.support import REPO

pytestmark = pytest.mark.integration

SCHEMA = (
    "hour TIMESTAMP, day DATE, device STRING, n BIGINT, share DOUBLE, amount DECIMAL(12,2), ok BOOLEAN, "
    "tags ARRAY<STRING>, span STRUCT<start: TIMESTAMP, end: TIMESTAMP>, counts MAP<STRING, INT>"
)


def rows(n: int, offset: int = 0) -> list[tuple]:
    hour = datetime(2026, 11, 1, tzinfo=UTC)
    return [
        (
            hour.replace(hour=i % 24),
            date(2026, 11, 1 + i % 28),
            f"d{i + offset}",
            i + offset,
            i / 7,
            Decimal(i) / 4,
            i % 2 == 0,
            [f"t{i}", None],
            (hour, hour.replace(hour=1)),
            {"a": i},
        )
        for i in range(n)
    ]


def sorted_rows(df) -> list:
    return sorted(map(repr, df.collect()))


def test_an_overwrite_by_delta_rs_reads_back_in_spark_as_the_batch_it_was_given(spark, tmp_path):
    path = tmp_path / "gold"
    spark.createDataFrame(rows(5), SCHEMA).write.format("delta").option("txnAppId", "app").option("txnVersion", 0).save(
        str(path)
    )  # the first write creates the table through Spark
    batch = spark.createDataFrame(rows(40, offset=100), SCHEMA)

    table = small_overwrite.table_to_overwrite(path, batch.schema.jsonValue())
    assert table is not None and table.transaction_version("app") == 0
    small_overwrite.overwrite(table, batch.toArrow(), "app", 1)

    assert sorted_rows(spark.read.format("delta").load(str(path))) == sorted_rows(batch)
    assert (
        spark.read.format("delta").load(str(path)).schema
        == spark.read.format("delta").option("versionAsOf", 0).load(str(path)).schema
    )  # the table's schema is untouched
    assert rows_added(path, 0, 1, newest_only=True) == 40  # what the run's event log reports as written
    txn = [
        json.loads(line)["txn"]
        for line in (path / "_delta_log" / f"{1:020d}.json").read_text().splitlines()
        if '"txn"' in line
    ]
    assert [(t["appId"], t["version"]) for t in txn] == [("app", 1)]
    # Delta's own txn action: delta-spark skips a write of batch 1 under the same app id.
    batch.write.format("delta").mode("overwrite").option("txnAppId", "app").option("txnVersion", 1).save(str(path))
    assert latest_version(path) == 1


def test_a_checkpoint_every_ten_commits_as_spark_would_make(spark, tmp_path):
    path = tmp_path / "gold"
    spark.createDataFrame(rows(3), SCHEMA).write.format("delta").save(str(path))
    for batch_id in range(1, 12):
        batch = spark.createDataFrame(rows(3 + batch_id), SCHEMA)
        small_overwrite.overwrite(
            small_overwrite.table_to_overwrite(path, batch.schema.jsonValue()), batch.toArrow(), "app", batch_id
        )
    assert (path / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == 10
    assert spark.read.format("delta").load(str(path)).count() == 14
    assert spark.read.format("delta").option("versionAsOf", 5).load(str(path)).count() == 8


def test_an_empty_result_empties_the_table(spark, tmp_path):
    path = tmp_path / "gold"
    spark.createDataFrame(rows(3), SCHEMA).write.format("delta").save(str(path))
    empty = spark.createDataFrame([], SCHEMA)
    small_overwrite.overwrite(
        small_overwrite.table_to_overwrite(path, empty.schema.jsonValue()), empty.toArrow(), "app", 1
    )
    assert spark.read.format("delta").load(str(path)).count() == 0
    assert latest_version(path) == 1


PROPERTIES_SPARK_MUST_HONOUR = {
    "symlink manifest": "'delta.compatibility.symlinkFormatManifest.enabled' = 'true'",  # regenerated on each write
    "auto optimize": "'delta.autoOptimize.optimizeWrite' = 'true'",
    "stats columns": "'delta.dataSkippingNumIndexedCols' = '2'",
}


@pytest.mark.parametrize(
    "change",
    ["check constraint", "partitioned", "append-only", "new column", "no table", *PROPERTIES_SPARK_MUST_HONOUR],
)
def test_tables_delta_rs_would_not_write_as_spark_does_go_through_spark(spark, tmp_path, change):
    path, batch = tmp_path / "gold", spark.createDataFrame(rows(5), SCHEMA)
    if change != "no table":
        writer = batch.write.format("delta")
        (writer.partitionBy("device") if change == "partitioned" else writer).save(str(path))
        if change != "partitioned":  # the table as created takes the path; the change below takes it away
            assert small_overwrite.table_to_overwrite(path, batch.schema.jsonValue()) is not None
    if change == "check constraint":  # a writer-version-3 feature
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT positive CHECK (n >= 0)")
    if change == "append-only":
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'true')")
    if change == "new column":
        batch = batch.selectExpr("*", "1 AS added")
    if change in PROPERTIES_SPARK_MUST_HONOUR:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({PROPERTIES_SPARK_MUST_HONOUR[change]})")
    assert small_overwrite.table_to_overwrite(path, batch.schema.jsonValue()) is None


def test_retention_and_checkpoint_properties_keep_the_delta_rs_path(spark, tmp_path):
    path, batch = tmp_path / "gold", spark.createDataFrame(rows(5), SCHEMA)
    batch.write.format("delta").save(str(path))
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '5', "
        "'delta.logRetentionDuration' = 'interval 7 days', 'delta.deletedFileRetentionDuration' = "
        "'interval 7 days')"
    )
    assert small_overwrite.table_to_overwrite(path, batch.schema.jsonValue()) is not None


def gold_writer(spark):
    from millpond.driver.sinks import CompleteOverwriteSink
    from millpond.runs.run_record import RunContext, TableResult
    from millpond.spec import load_pipeline

    table = load_pipeline(REPO / "pipelines" / "activity.yaml").tables["gold.device_counts"]
    return CompleteOverwriteSink(
        spark, table, "millpond:test", RunContext("t"), TableResult(table.id, "gold", datetime.now(UTC))
    )


def newest_commit(spark, path) -> tuple[str, int]:
    """The newest commit's engine and the batch id in its `txn` action."""
    newest = latest_version(path)
    lines = (path / "_delta_log" / f"{newest:020d}.json").read_text().splitlines()
    txn = [json.loads(line)["txn"]["version"] for line in lines if '"txn"' in line]
    engine = [json.loads(line)["commitInfo"].get("engineInfo", "") for line in lines if '"commitInfo"' in line]
    return engine[0].split("/")[0].split("-")[0], txn[0]


def test_the_batch_not_the_table_decides_whether_delta_rs_takes_it(spark, lake, monkeypatch):
    """A batch over SMALL_ROWS is written by Spark even onto a small table (it is counted before it is collected to
    the driver), a small one by delta-rs; each commit carries the batch's `txn`, and a replay writes nothing."""
    from pyspark.sql import functions as F

    writer, path = gold_writer(spark), paths.table_path("gold.device_counts")
    monkeypatch.setattr(small_overwrite, "SMALL_ROWS", 4)
    counts = [
        spark.range(n).select(
            F.concat(F.lit("d"), F.col("id").cast("string")).alias("Device"), F.col("id").alias("total_recordings")
        )
        for n in (3, 6, 2)
    ]
    assert writer.write(counts[0], str(path), "overwrite", 0)  # the first write creates the table through Spark
    assert writer.write(counts[1], str(path), "overwrite", 1)
    assert newest_commit(spark, path) == ("Apache", 1)  # 6 rows > 4 onto a 3-row table: Spark
    assert writer.write(counts[2], str(path), "overwrite", 2)
    assert newest_commit(spark, path) == ("delta", 2)  # delta-rs
    version = latest_version(path)
    assert not writer.write(counts[1], str(path), "overwrite", 2) and latest_version(path) == version  # a replay
    assert spark.read.format("delta").load(str(path)).count() == 2
    monkeypatch.setenv("MILLPOND_DELTA_RS_COMMITS", "off")
    assert writer.write(counts[2], str(path), "overwrite", 3)
    assert newest_commit(spark, path) == ("Apache", 3)  # the speed-up off: Spark
