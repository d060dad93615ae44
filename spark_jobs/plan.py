"""Turn a table's spec into its streaming DataFrame: watermark -> transform -> dedup -> aggregate -> sort.

No reads or writes here beyond the source handed in, so the same plan runs on a static frame in tests.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from millpond.spec import Table, Transform


def plan_table(source: DataFrame, table: Table) -> DataFrame:
    df = source
    if table.watermark:
        df = df.withWatermark(table.watermark.column, table.watermark.delay)
    if table.transform:
        df = apply_transform(df, table.transform)
    if table.dedup_keys:
        df = deduplicate(df, table)
    if table.aggregate:
        df = aggregate(df, table)
    if table.order_by:
        df = df.orderBy(*table.order_by)
    return df


def apply_transform(df: DataFrame, transform: Transform) -> DataFrame:
    if transform.sql:
        df.createOrReplaceTempView("source")
        return df.sparkSession.sql(transform.sql)
    return load_function(transform.function or "")(df)


def load_function(reference: str) -> Callable[[DataFrame], DataFrame]:
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


def deduplicate(df: DataFrame, table: Table) -> DataFrame:
    """Keys that include the watermark column expire with it; otherwise dedup only within the watermark delay."""
    keys = list(table.dedup_keys)
    if table.watermark and table.watermark.column in keys:
        return df.dropDuplicates(keys)
    return df.dropDuplicatesWithinWatermark(keys)


def aggregate(df: DataFrame, table: Table) -> DataFrame:
    agg = table.aggregate
    assert agg is not None
    groups = [F.col(c) for c in agg.group_by]
    if agg.window:
        groups.insert(0, F.window(agg.window.column, agg.window.duration, agg.window.slide).alias("_window"))
    measures = [F.expr(expression).alias(name) for name, expression in agg.measures]
    result = df.groupBy(*groups).agg(*measures)
    if agg.window:
        others = [c for c in result.columns if c != "_window"]
        result = result.select(F.col("_window.start").alias(agg.window.alias), *others)
    return result
