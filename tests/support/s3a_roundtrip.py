"""A child process for tests/integration/object_store/test_spark_s3a.py: Spark on an s3a:// lake, as a run uses it.

Its own process because the s3a jars join Spark's classpath only when a JVM starts for an object-store lake, and a
test worker's session JVM is already up for local lakes. It reads MILLPOND_LAKE and the AWS_* variables from its
environment (never from its command line) and prints one JSON line of what it found.

Steps: two Delta appends and a read; an availableNow json -> Delta stream over the landing folder, run three times
(a new landing file arrives before the second run; the third finds nothing new). Each stream run's S3 requests are
counted by S3A itself (IOStatistics of the cached filesystem instance: LIST, HEAD, GET, PUT, DELETE, COPY). Then two
commits through Delta's log store as the session configures it, each raced by another writer's PUT of the same
`_delta_log` entry (`commit_race`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from py4j.protocol import Py4JJavaError
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from millpond import settings
from millpond.driver import s3a
from millpond.driver.session import build_spark_session
from millpond.lake.object_store import S3Location, client

REQUESTS = {
    "LIST": "object_list_request",
    "HEAD": "object_metadata_request",
    "GET": "action_http_get_request",
    "PUT": "object_put_request",
    "DELETE": "object_delete_request",
    "COPY": "object_copy_requests",
}


def s3_requests(spark: SparkSession, lake: str) -> dict[str, int]:
    """The requests the lake's cached S3A filesystem instance has counted so far. Partial: another instance (a
    FileContext's, or one created uncached) counts its own."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(lake)
    counters = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).getIOStatistics().counters()
    return {name: int(counters.get(key) or 0) for name, key in REQUESTS.items()}


def mark(lake: str, name: str) -> None:
    """A request the server logs and nothing else sends (a listing of `_marker/<name>`), so a test reading the
    server's request log can tell which requests each stream run made."""
    location = S3Location.parse(lake)
    client().list_objects_v2(Bucket=location.bucket, Prefix=f"_marker/{name}")


class RacingActions:
    """A commit's lines as a java.util.Iterator whose first next() makes another writer PUT the same log entry first,
    after the log store has checked that the entry is absent and before it uploads its own."""

    def __init__(self, bucket: str, key: str, lines: list[str], other: bytes) -> None:
        self.bucket, self.key, self.lines, self.other = bucket, key, list(lines), other

    def hasNext(self) -> bool:  # noqa: N802 (java.util.Iterator)
        return bool(self.lines)

    def next(self) -> str:
        if self.other:
            client().put_object(Bucket=self.bucket, Key=self.key, Body=self.other)
            self.other = b""
        return self.lines.pop(0)

    class Java:
        implements = ["java.util.Iterator"]


def commit_race(spark: SparkSession, lake: str) -> dict[str, object]:
    """Version 0 of three tables written through Delta's log store for the lake's scheme, built from the session's
    conf as Delta builds it (`LogStore.createLogStore`). `lost`: another writer PUTs a different commit of the same
    entry after the store found it absent, so this write must fail with FileAlreadyExistsException (Delta then
    retries above it) and leave the other's; `retried`: the entry already holds exactly this write's bytes (a PUT that
    landed, whose reply was lost), so the write stands; `unconditional`: S3A's conditional create switched off, so
    the write must be refused, not made unconditionally. Returns what each raised and what each entry holds."""
    jvm = spark.sparkContext._jvm
    ensure_callback_server_started(spark.sparkContext._gateway)
    provider = getattr(getattr(jvm.org.apache.spark.sql.delta.storage, "LogStore$"), "MODULE$")
    store = provider.createLogStore(spark._jsparkSession)
    session_conf = spark.sparkContext._jsc.hadoopConfiguration()
    unconditional = jvm.org.apache.hadoop.conf.Configuration(session_conf)
    unconditional.set("fs.s3a.create.conditional.enabled", "false")
    unconditional.set("fs.s3a.impl.disable.cache", "true")
    mine = ['{"commitInfo":{"writer":"this"}}', '{"add":{"path":"mine.parquet"}}']
    sent = "".join(line + "\n" for line in mine).encode()
    other = b'{"commitInfo":{"writer":"other"}}\n'
    outcome: dict[str, object] = {"log_store": spark.conf.get(s3a.S3A_LOG_STORE)}
    for case, raced_with, hadoop_conf in [
        ("lost", other, session_conf),
        ("retried", sent, session_conf),
        ("unconditional", b"", unconditional),
    ]:
        entry = S3Location.parse(f"{lake}/_race/{case}/_delta_log/00000000000000000000.json")
        actions = RacingActions(entry.bucket, entry.key, mine, raced_with)
        try:
            store.write(
                jvm.org.apache.hadoop.fs.Path(entry.url),
                jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions),
                False,
                hadoop_conf,
            )
            raised = None
        except Py4JJavaError as error:
            raised = error.java_exception.getClass().getName()
        found = client().list_objects_v2(Bucket=entry.bucket, Prefix=entry.key).get("KeyCount", 0)
        held = client().get_object(Bucket=entry.bucket, Key=entry.key)["Body"].read() if found else None
        holds = None if held is None else "mine" if held == sent else "other" if held == other else held.decode()
        outcome[case] = {"raised": raised, "holds": holds}
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--landing", required=True, help="an s3a:// folder of json files to stream")
    args = parser.parse_args(argv)
    lake = settings.LAKE.raw()
    assert lake and lake.startswith(("s3a://", "s3://")), lake
    started = time.monotonic()
    spark = build_spark_session("millpond-s3a-roundtrip")
    seconds: dict[str, float] = {"session": time.monotonic() - started}
    result: dict[str, object] = {
        "seconds": seconds,
        "jars": spark.conf.get("spark.jars", ""),
        "classpath": spark.conf.get("spark.driver.extraClassPath", ""),
    }
    try:
        table = f"{lake}/appended"
        t = time.monotonic()
        spark.range(0, 5).selectExpr("id", "id * 10 AS value").write.format("delta").mode("append").save(table)
        spark.range(5, 8).selectExpr("id", "id * 10 AS value").write.format("delta").mode("append").save(table)
        seconds["two_appends"] = time.monotonic() - t
        result["rows"] = [[r.id, r.value] for r in spark.read.format("delta").load(table).orderBy("id").collect()]
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
        result["versions"] = [r.version for r in history]
        streamed, runs, requests = f"{lake}/streamed", [], []
        for run in range(3):
            if run == 1:  # a new landing file between the first and second run
                landing = S3Location.parse(args.landing)
                body = json.dumps({"id": 99, "name": "late"}) + "\n"
                client().put_object(Bucket=landing.bucket, Key=f"{landing.key}/late.json", Body=body.encode())
            mark(lake, f"start-{run + 1}")
            before = s3_requests(spark, lake)
            t = time.monotonic()
            query = (
                spark.readStream.format("json")
                .schema("id BIGINT, name STRING")
                .load(args.landing)
                .writeStream.format("delta")
                .option("checkpointLocation", f"{lake}/_checkpoints/streamed")
                .trigger(availableNow=True)
                .queryName("s3a_roundtrip")
                .start(streamed)
            )
            query.awaitTermination()
            seconds[f"stream_run_{run + 1}"] = time.monotonic() - t
            after = s3_requests(spark, lake)
            mark(lake, f"end-{run + 1}")
            requests.append({name: after[name] - before[name] for name in REQUESTS})
            rows = spark.read.format("delta").load(streamed).count()
            runs.append({"rows": rows, "versions": spark.sql(f"DESCRIBE HISTORY delta.`{streamed}`").count()})
        result["stream_runs"] = runs
        result["stream_requests"] = requests
        result["streamed"] = sorted([r.id, r.name] for r in spark.read.format("delta").load(streamed).collect())
        t = time.monotonic()
        result["commit_race"] = commit_race(spark, lake)
        seconds["commit_race"] = time.monotonic() - t
    finally:
        spark.stop()
    result["seconds"] = {k: round(v, 1) for k, v in seconds.items()}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
