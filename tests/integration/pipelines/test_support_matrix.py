"""The validator against Spark itself: every operator in every output mode, asked of both.

Each cell of the matrix is one operator (a projection, a dedup, aggregations with and without a watermark, a sort,
stream-stream joins, a stateful function) in one output mode (append, update, complete). For each cell the test
writes the millpond spec and, independently, the same query in plain PySpark over two Delta streams, and starts that
query on real Spark. Spark's answer is the reference: whatever Spark refuses, the validator must refuse before any
Spark starts, with a fix. Where millpond refuses what Spark would run, the cell is listed in STRICTER with the reason,
so a rule cannot tighten (or loosen) silently.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from millpond.spec import SpecError, load_pipeline
from spark_jobs.transforms.sessions import sessions

pytestmark = pytest.mark.integration

MODES = ("append", "update", "complete")
WATERMARK = {"column": "ts", "delay": "10 minutes"}
OUTPUT_SCHEMA = "k STRING, session_start TIMESTAMP, session_end TIMESTAMP, events BIGINT"
STATE_SCHEMA = "open_sessions STRING"
BASE = {
    "pipeline": "matrix",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "sources": {
        "a": {"format": "json", "path": "landing/a", "schema": "k STRING, ts TIMESTAMP, v BIGINT"},
        "b": {"format": "json", "path": "landing/b", "schema": "k STRING, ts2 TIMESTAMP"},
        "labels": {"static": True, "format": "csv", "path": "landing/labels", "schema": "k STRING, label STRING"},
    },
    "tables": {"bronze.a": {"from": "landing.a"}, "bronze.b": {"from": "landing.b"}},
}


@dataclass(frozen=True)
class Operator:
    """One operator: its millpond spec fragment and the same query written in plain PySpark."""

    spec: dict[str, Any]
    spark: Any  # (a, b, mode) -> DataFrame; a and b are the two Delta streams


def join_query(how: str, watermarks: bool):
    def query(a: DataFrame, b: DataFrame, mode: str) -> DataFrame:
        if watermarks:
            a, b = a.withWatermark("ts", "10 minutes"), b.withWatermark("ts2", "10 minutes")
        b = b.withColumnRenamed("k", "bk")
        return a.join(b, (a.k == b.bk) & (b.ts2 >= a.ts) & (b.ts2 <= a.ts + F.expr("INTERVAL 1 HOUR")), how)

    return query


def join(how: str, watermarks: bool = True) -> Operator:
    block = {"with": "bronze.b", "using": ["k"], "type": how}
    if watermarks:
        block |= {
            "watermark": {"column": "ts2", "delay": "10 minutes"},
            "time_range": {"min": "0 seconds", "max": "1 hour"},
        }
    return Operator({"join": block, **({"watermark": WATERMARK} if watermarks else {})}, join_query(how, watermarks))


def stateful_query(a: DataFrame, b: DataFrame, mode: str) -> DataFrame:
    function = partial(sessions, timestamp="ts", gap="30 minutes")
    state_mode = "append" if mode == "complete" else mode  # complete has no stateful-function form to ask for
    return (
        a.withWatermark("ts", "10 minutes")
        .select("k", "ts")
        .groupBy("k")
        .applyInPandasWithState(function, OUTPUT_SCHEMA, STATE_SCHEMA, state_mode, GroupStateTimeout.EventTimeTimeout)
    )


COUNT = {"group_by": ["k"], "measures": {"n": "count(*)"}}
WINDOWED = {"window": {"column": "ts", "duration": "10 minutes", "as": "w"}, **COUNT}
OPERATORS: dict[str, Operator] = {
    "projection": Operator(
        {"transform": {"sql": "SELECT k, ts, v FROM source WHERE v > 0"}}, lambda a, b, mode: a.where("v > 0")
    ),
    "dedup with watermark": Operator(
        {"watermark": WATERMARK, "dedup": {"keys": ["k", "ts"]}},
        lambda a, b, mode: a.withWatermark("ts", "10 minutes").dropDuplicates(["k", "ts"]),
    ),
    "dedup without watermark": Operator(
        {"dedup": {"keys": ["k", "ts"]}}, lambda a, b, mode: a.dropDuplicates(["k", "ts"])
    ),
    "aggregate without watermark": Operator(
        {"aggregate": COUNT, "keys": ["k"]}, lambda a, b, mode: a.groupBy("k").agg(F.count("*").alias("n"))
    ),
    "aggregate, watermark not grouped": Operator(
        {"watermark": WATERMARK, "aggregate": COUNT, "keys": ["k"]},
        lambda a, b, mode: a.withWatermark("ts", "10 minutes").groupBy("k").agg(F.count("*").alias("n")),
    ),
    "window with watermark": Operator(
        {"watermark": WATERMARK, "aggregate": WINDOWED, "keys": ["w", "k"]},
        lambda a, b, mode: (
            a.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "10 minutes"), "k").agg(F.count("*").alias("n"))
        ),
    ),
    "sort": Operator({"order_by": ["k"]}, lambda a, b, mode: a.orderBy("k")),
    "sort after aggregate": Operator(
        {"aggregate": COUNT, "keys": ["k"], "order_by": ["k"]},
        lambda a, b, mode: a.groupBy("k").agg(F.count("*").alias("n")).orderBy("k"),
    ),
    "inner join with watermarks": join("inner"),
    "inner join without watermarks": join("inner", watermarks=False),
    "left outer join with watermarks": join("left_outer"),
    "left outer join without watermarks": join("left_outer", watermarks=False),
    "stream-static left outer lookup": Operator(
        {"lookup": {"with": "landing.labels", "using": ["k"], "type": "left_outer"}},
        lambda a, b, mode: a.join(
            a.sparkSession.createDataFrame([("d1", "x")], "k STRING, label STRING"), "k", "left_outer"
        ),
    ),
    "stateful function": Operator(
        {
            "watermark": WATERMARK,
            "keys": ["k"],
            "stateful": {
                "function": "spark_jobs.transforms.sessions:sessions",
                "key": ["k"],
                "output_schema": OUTPUT_SCHEMA,
                "state_schema": STATE_SCHEMA,
                "timeout": "event_time",
                "options": {"timestamp": "ts", "gap": "30 minutes"},
            },
        },
        stateful_query,
    ),
}

# Cells Spark runs and millpond refuses anyway, with the reason the validator gives.
STRICTER = {
    ("projection", "update"): "has no aggregate (nor dedup): every row it writes is new",
    ("stream-static left outer lookup", "update"): "has no aggregate (nor dedup): every row it writes is new",
    ("dedup without watermark", "append"): "keeps every key in state forever",
    ("dedup without watermark", "update"): "keeps every key in state forever",
    ("inner join without watermarks", "append"): "a join buffers the rows of both sides in state",
    # Spark 4 runs a stream-stream inner join in update mode; each joined row is new, so there is nothing to MERGE.
    ("inner join with watermarks", "update"): "runs in append mode only, not update",
    ("inner join without watermarks", "update"): "runs in append mode only, not update",
}
CELLS = [(operator, mode) for operator in OPERATORS for mode in MODES]


@pytest.fixture(scope="module")
def streams(spark: SparkSession, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("matrix")
    a, b = root / "a", root / "b"
    spark.sql("SELECT 'd1' AS k, TIMESTAMP'2026-11-01 00:00:00' AS ts, 1L AS v").write.format("delta").save(str(a))
    spark.sql("SELECT 'd1' AS k, TIMESTAMP'2026-11-01 00:05:00' AS ts2").write.format("delta").save(str(b))
    return a, b


def spark_refuses(
    spark: SparkSession, streams: tuple[Path, Path], operator: Operator, mode: str, checkpoint: Path
) -> str | None:
    """Start the plain PySpark query to completion; Spark's refusal message, or None if it ran."""
    a, b = (spark.readStream.format("delta").load(str(path)) for path in streams)
    try:
        query = (
            operator.spark(a, b, mode)
            .writeStream.format("noop")
            .outputMode(mode)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    except (AnalysisException, StreamingQueryException) as refused:
        return str(refused)
    return None


def millpond_refuses(tmp_path: Path, operator: Operator, mode: str) -> str | None:
    spec = copy.deepcopy(BASE)
    spec["tables"]["silver.x"] = {"from": "bronze.a", "output_mode": mode, **copy.deepcopy(operator.spec)}
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(spec))
    try:
        load_pipeline(path, lake_root=tmp_path / "lake")
    except SpecError as refused:
        return str(refused)
    return None


@pytest.mark.parametrize(("operator", "mode"), CELLS, ids=[f"{o} in {m}" for o, m in CELLS])
def test_the_validator_refuses_whatever_spark_refuses(spark, streams, tmp_path, operator, mode):
    by_spark = spark_refuses(spark, streams, OPERATORS[operator], mode, tmp_path / "checkpoint")
    by_millpond = millpond_refuses(tmp_path, OPERATORS[operator], mode)
    if by_spark:
        assert by_millpond, f"Spark refuses {operator} in {mode} mode, millpond's validator let it through:\n{by_spark}"
        assert "tables.silver.x" in by_millpond and "Fix:" in by_millpond, by_millpond
    elif (operator, mode) in STRICTER:
        assert by_millpond and STRICTER[operator, mode] in by_millpond, by_millpond
    else:
        assert by_millpond is None, f"Spark runs {operator} in {mode} mode, millpond refuses it:\n{by_millpond}"
