"""Pure transforms on tiny static frames: JSON parsing with reasons, and each table's plan from its spec."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql.types import StructType

from millpond.driver.plan import plan_table
from millpond.driver.sources import ERROR, parse_json_lines
from millpond.spec import Aggregate, Table, Transform, Watermark, Window

pytestmark = pytest.mark.integration

SCHEMA_DDL = "Recorded_At TIMESTAMP, Device STRING, Index BIGINT, x DOUBLE"


def lines(spark, *values):
    return spark.createDataFrame([(v, "f.json") for v in values], "value STRING, _source_file STRING")


def test_parse_keeps_good_rows_typed_and_explains_bad_ones(spark):
    parsed = parse_json_lines(
        lines(
            spark,
            '{"Recorded_At": "2026-11-01T02:00:00.373Z", "Device": "d1", "Index": 7, "x": 1}',
            '{"Device": "d2", "Index": 3.5}',
            '{"Device": "d3", "x": [1]}',
            "",
            '{"Device": "d4"',
            '"just a string"',
            '{"Device": "d5", "Recorded_At": "yesterday"}',
        ),
        StructType.fromDDL(SCHEMA_DDL),
    ).collect()
    assert len(parsed) == 6  # the blank line is not a record
    good = [r for r in parsed if r[ERROR] is None]
    expected = [("d1", 7, 1.0, datetime(2026, 11, 1, 2, 0, 0, 373000))]
    assert [(r.Device, r.Index, r.x, r.Recorded_At) for r in good] == expected
    reasons = {r._raw: r[ERROR] for r in parsed if r[ERROR]}
    assert reasons == {
        '{"Device": "d2", "Index": 3.5}': "field Index: expected bigint, got 3.5",
        '{"Device": "d3", "x": [1]}': "field x: expected double, got [1]",
        '{"Device": "d4"': "malformed JSON (truncated or invalid syntax)",
        '"just a string"': "not a JSON object",
        '{"Device": "d5", "Recorded_At": "yesterday"}': "field Recorded_At: expected timestamp, got yesterday",
    }


def rows(spark):
    data = [
        (datetime(2026, 11, 1, 0, 10), "a", 1, "walk", 1.0),
        (datetime(2026, 11, 1, 0, 10), "a", 1, "walk", 1.0),  # duplicate
        (datetime(2026, 11, 1, 0, 50), "a", 2, "sit", 3.0),
        (datetime(2026, 11, 1, 1, 5), "b", 1, "walk", 5.0),
        (datetime(2026, 11, 1, 1, 6), None, 9, "walk", 7.0),
    ]
    return spark.createDataFrame(data, "Recorded_At TIMESTAMP, Device STRING, Index BIGINT, gt STRING, x DOUBLE")


def test_sql_transform_then_dedup(spark):
    table = Table(
        "silver",
        "t",
        "bronze.t",
        watermark=Watermark("Recorded_At", "1 hour"),
        transform=Transform(sql="SELECT * FROM source WHERE Device IS NOT NULL"),
        dedup_keys=("Device", "Index", "Recorded_At"),
    )
    result = plan_table(rows(spark), table)
    assert sorted((r.Device, r.Index) for r in result.collect()) == [("a", 1), ("a", 2), ("b", 1)]


def test_windowed_aggregate_names_the_window_start(spark):
    table = Table(
        "gold",
        "hourly",
        "silver.t",
        output_mode="complete",
        aggregate=Aggregate(
            ("gt",), (("n", "count(*)"), ("avg_x", "avg(x)")), Window("Recorded_At", "1 hour", alias="hour")
        ),
    )
    result = {(r.hour, r.gt): (r.n, r.avg_x) for r in plan_table(rows(spark), table).collect()}
    assert result == {
        (datetime(2026, 11, 1, 0), "walk"): (2, 1.0),
        (datetime(2026, 11, 1, 0), "sit"): (1, 3.0),
        (datetime(2026, 11, 1, 1), "walk"): (2, 6.0),
    }


def test_function_transform_is_loaded_by_reference(spark):
    reference = "tests.support.sample_transforms:only_walks"
    table = Table("silver", "t", "bronze.t", transform=Transform(function=reference))
    assert {r.gt for r in plan_table(rows(spark), table).collect()} == {"walk"}


def test_a_lookup_keeps_stream_columns_then_new_dimension_columns_inner_or_left_outer(spark):
    """Keys appear once (the stream's); inner keeps matched rows only, left_outer every stream row with nulls."""
    from millpond.spec import Lookup

    stream = spark.createDataFrame(
        [("i1", "ad_1"), ("i2", "ad_9"), ("i3", "ad_2")], "impression_id STRING, ad_id STRING"
    )
    dimension = spark.createDataFrame(
        [("ad_2", "summer", "acme"), ("ad_1", "spring", "acme"), ("ad_7", "x", "y")],
        "AD_ID STRING, campaign STRING, advertiser STRING",
    )
    for kind, expected in (
        ("inner", {("i1", "ad_1", "spring", "acme"), ("i3", "ad_2", "summer", "acme")}),
        (
            "left_outer",
            {("i1", "ad_1", "spring", "acme"), ("i2", "ad_9", None, None), ("i3", "ad_2", "summer", "acme")},
        ),
    ):
        table = Table("gold", "t", "silver.t", lookup=Lookup("landing.campaigns", ("ad_id",), kind))
        result = plan_table(stream, table, dimension=dimension)
        assert result.columns == ["impression_id", "ad_id", "campaign", "advertiser"]
        rows = result.collect()
        assert len(rows) == len(expected) and {tuple(r) for r in rows} == expected, kind
