"""Turn a table's spec into its streaming DataFrame: watermark -> join -> lookup -> transform -> stateful | dedup
-> aggregate -> sort.

No reads or writes here beyond the source handed in, so the same plan runs on a static frame in tests.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Iterator
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from millpond.spec import Stateful, Table, Transform, make_project_importable, signed_seconds

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupState

LEFT, RIGHT = "_from", "_with"  # the two sides of a join, while its condition is built
TIMEOUTS = {"event_time": "EventTimeTimeout", "none": "NoTimeout"}  # spec -> pyspark GroupStateTimeout


def plan_table(
    source: DataFrame, table: Table, joined: DataFrame | None = None, dimension: DataFrame | None = None
) -> DataFrame:
    """`joined` is the join's `with` side (sources.read_join_source); only a join table takes one. `dimension` is
    a lookup's static side (sources.read_dimension); only a lookup table takes one."""
    df = source
    if table.watermark:
        df = df.withWatermark(table.watermark.column, table.watermark.delay)
    if table.join:
        assert joined is not None, f"{table.id} joins {table.join.with_table}: pass its stream"
        df = join(df, joined, table)
    if table.lookup:
        assert dimension is not None, f"{table.id} looks up {table.lookup.dimension}: pass the dimension"
        df = lookup(df, dimension, table)
    if table.transform:
        df = apply_transform(df, table.transform)
    if table.stateful:
        df = apply_stateful(df, table.stateful, table.query_output_mode)
    if table.dedup_keys:
        df = deduplicate(df, table)
    if table.aggregate:
        df = aggregate(df, table)
    if table.order_by:
        df = df.orderBy(*table.order_by)
    return df


def join(left: DataFrame, right: DataFrame, table: Table) -> DataFrame:
    """Stream-stream join on equal keys and an event-time range, both sides under a watermark.

    The time range (`with` time - `from` time between min and max) plus the watermarks is what lets Spark drop a
    buffered row once no future row of the other side can match it, and emit an unmatched `from` row of a
    left_outer join (with nulls) at that moment, once. The joined row holds every `from` column, then each `with`
    column whose name the `from` side does not have (so the keys appear once, with the `from` side's value).
    Names compare case-insensitively, as Spark resolves them.
    """
    spec = table.join
    assert spec is not None and spec.watermark is not None and table.watermark is not None
    right = right.withWatermark(spec.watermark.column, spec.watermark.delay)
    left_time = F.col(f"{LEFT}.`{table.watermark.column}`")
    right_time = F.col(f"{RIGHT}.`{spec.watermark.column}`")
    low, high = (F.expr(f"INTERVAL {signed_seconds(bound)} SECONDS") for bound in spec.time_range)
    keys = [F.col(f"{LEFT}.`{key}`") == F.col(f"{RIGHT}.`{key}`") for key in spec.using]
    condition = reduce(lambda a, b: a & b, keys) & (right_time >= left_time + low) & (right_time <= left_time + high)
    matched = left.alias(LEFT).join(right.alias(RIGHT), condition, spec.type)
    taken = {c.lower() for c in left.columns}
    extra = [c for c in right.columns if c.lower() not in taken]
    return matched.select(*[F.col(f"{LEFT}.`{c}`") for c in left.columns], *[F.col(f"{RIGHT}.`{c}`") for c in extra])


def lookup(stream: DataFrame, dimension: DataFrame, table: Table) -> DataFrame:
    """Stream-static join on equal keys: stateless, so no watermark, and nothing of it lives in the checkpoint.

    Spark joins each micro-batch with the dimension as read when the query started. The row holds every stream
    column, then each dimension column the stream does not have (keys once, with the stream's value), as `join`.
    """
    spec = table.lookup
    assert spec is not None
    keys = [F.col(f"{LEFT}.`{key}`") == F.col(f"{RIGHT}.`{key}`") for key in spec.using]
    matched = stream.alias(LEFT).join(dimension.alias(RIGHT), reduce(lambda a, b: a & b, keys), spec.type)
    taken = {c.lower() for c in stream.columns}
    extra = [c for c in dimension.columns if c.lower() not in taken]
    return matched.select(*[F.col(f"{LEFT}.`{c}`") for c in stream.columns], *[F.col(f"{RIGHT}.`{c}`") for c in extra])


def apply_transform(df: DataFrame, transform: Transform) -> DataFrame:
    if transform.sql:
        df.createOrReplaceTempView("source")
        return df.sparkSession.sql(transform.sql)
    return load_function(transform.function or "")(df)


def load_function(reference: str) -> Callable[..., Any]:
    module, name = reference.split(":")
    make_project_importable()
    return getattr(importlib.import_module(module), name)


def apply_stateful(df: DataFrame, stateful: Stateful, output_mode: str) -> DataFrame:
    """Group by the key and run the function with its state: `function(key, rows, state, **options)`.

    applyInPandasWithState, not transformWithStateInPandas: the state is one row per key whose schema the spec
    declares (so a change is caught before Spark), the function is a plain `module:function` like any transform,
    and the event-time timeout is the course's GroupState pattern (docs/spec.md).
    """
    function = functools.partial(
        call_stateful, load_function(stateful.function), dict(stateful.options), list(stateful.output_columns)
    )
    return df.groupBy(*stateful.key).applyInPandasWithState(
        function, stateful.output_schema, stateful.state_schema, output_mode, TIMEOUTS[stateful.timeout]
    )


def call_stateful(
    function: Callable[..., Iterable[pd.DataFrame]],
    options: dict[str, Any],
    columns: list[str],
    key: tuple[Any, ...],
    rows: Iterator[pd.DataFrame],
    state: GroupState,
) -> Iterator[pd.DataFrame]:
    """Run the user's function; name integer-labelled output columns by position from `output_schema`.

    PySpark 4.2 reads integer labels as no match and writes nulls, so a function that does not know what the spec
    calls the key columns (a generic one, like sessions) yields them by position and gets them named here.
    """
    for frame in function(key, rows, state, **options):
        if len(frame.columns) == len(columns) and not all(isinstance(c, str) for c in frame.columns):
            frame = frame.set_axis(columns, axis=1)
        yield frame


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
