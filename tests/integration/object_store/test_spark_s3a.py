"""Spark and Delta on an s3a:// lake against a real S3 server (s3proxy): appends, reads and an availableNow file
stream whose checkpoint lives in the bucket, in a process that starts its JVM for that lake as a run does, and Delta
commits raced by another writer's PUT of the same log entry. The server logs every request, so each stream run's S3
requests are counted on the server's side too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable

from millpond.dev.s3_server import S3Server
from millpond.lake.object_store import delta_rs_options
from tests.support import REPO
from tests.support.s3 import new_bucket

pytestmark = pytest.mark.integration


@pytest.fixture
def logged_bucket(monkeypatch):
    """A bucket on a server of its own that logs every request (the session's server does not, to stay fast)."""
    server = S3Server(log_requests=True).start()
    yield new_bucket(server, monkeypatch)
    server.stop()


def kind(method: str, path: str) -> str:
    """LIST, HEAD, GET (an object), PUT (copies included: s3proxy's log does not tell them apart), DELETE."""
    target, _, query = path.partition("?")
    if method == "GET" and ("list-type=" in query or "prefix=" in query or target.count("/") == 1):
        return "LIST"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


def per_stream_run(requests: list[tuple[str, str]]) -> list[dict[str, int]]:
    """The requests between each `start-N` and `end-N` marker of tests/support/s3a_roundtrip.py, by kind."""
    runs, current = [], None
    for method, path in requests:
        if "_marker/start-" in unquote(path):
            current = Counter()
        elif "_marker/end-" in unquote(path):
            runs.append({k: current[k] for k in ("LIST", "HEAD", "GET", "PUT", "DELETE")})
            current = None
        elif current is not None:
            current[kind(method, path)] += 1
    return runs


def test_delta_appends_reads_a_file_stream_and_raced_commits_on_s3a(logged_bucket):
    s3_bucket = logged_bucket
    s3 = s3_bucket.client()
    for i in range(2):
        body = json.dumps({"id": i, "name": f"n{i}"}) + "\n"
        s3.put_object(Bucket=s3_bucket.name, Key=f"landing/f{i}.json", Body=body.encode())
    lake = s3_bucket.location("lake").url
    env = {**os.environ, "MILLPOND_LAKE": lake, "PYSPARK_PYTHON": sys.executable}
    landing = s3_bucket.location("landing").url
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.s3a_roundtrip", "--landing", landing],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert s3_bucket.access.secret_key not in done.stdout + done.stderr  # never printed, never logged
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["rows"] == [[i, i * 10] for i in range(8)]
    assert result["versions"] == [0, 1]
    # run 1 takes both files, run 2 only the late one, run 3 finds nothing and commits nothing
    assert result["stream_runs"] == [{"rows": 2, "versions": 1}, {"rows": 3, "versions": 2}, {"rows": 3, "versions": 2}]
    assert result["streamed"] == [[0, "n0"], [1, "n1"], [99, "late"]]
    assert "hadoop-aws-3.5.0.jar" in result["classpath"] and "hadoop-aws" not in result["jars"]
    keys = s3_bucket.keys("lake/")
    assert "lake/appended/_delta_log/00000000000000000001.json" in keys
    assert "lake/streamed/_delta_log/00000000000000000001.json" in keys
    assert {"lake/_checkpoints/streamed/commits/0", "lake/_checkpoints/streamed/commits/1"} <= set(keys)
    # the no-JVM side (status, event log) reads what Spark wrote
    appended = DeltaTable(f"s3://{s3_bucket.name}/lake/appended", storage_options=delta_rs_options())
    assert appended.version() == 1 and sorted(appended.to_pyarrow_table()["id"].to_pylist()) == list(range(8))
    first, increment, nothing_new = result["stream_requests"]
    assert nothing_new["PUT"] < increment["PUT"] and nothing_new["GET"] <= increment["GET"]
    # A commit raced by another writer that PUT the same _delta_log entry after the log store found it absent
    # (s3a_roundtrip.commit_race, through the log store Delta builds from the session's conf): the loser gets
    # FileAlreadyExistsException, which Delta retries above the winner, and the winner's entry stays; an entry that
    # already holds this very write's bytes (a PUT that landed, then its retry refused) is this write's, and stands.
    race = result["commit_race"]
    assert race["lost"] == {"raised": "java.nio.file.FileAlreadyExistsException", "holds": "other"}, race
    assert race["retried"] == {"raised": None, "holds": "mine"}, race
    # S3A's conditional create switched off: refused (hadoop-aws's "Conditional Writes Unavailable"), not written
    assert race["unconditional"] == {"raised": "org.apache.hadoop.fs.PathIOException", "holds": None}, race
    assert race["log_store"] == "millpond.spark.ConditionalS3LogStore"
    served = per_stream_run(s3_bucket.server.requests())
    assert len(served) == 3 and served[2]["PUT"] == 0 < served[1]["PUT"]
    print("s3a timings (s):", result["seconds"])
    print("s3a requests per stream run, as S3A counted them:", result["stream_requests"])
    print("s3a requests per stream run, as the server saw them:", served)
