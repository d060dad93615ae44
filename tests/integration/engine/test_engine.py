"""`millpond engine`: a Spark Connect server runs use through SPARK_REMOTE. Its life (start, status, the token,
stop), a run whose code differs from the engine's or whose lake it cannot reach refuses, and what only the engine
has: a notebook's own session beside a run's, a terminated run's session, runs of two pipelines at once.

The module's own engine, started on a folder lake, is the one these tests start, inspect and stop. Runs go to the
test worker's engine (tests/conftest.py::engine_server), which the tests written for both backends share: the
rounds (tests/integration/pipelines/test_runner.py), SIGKILLs and reruns (tests/integration/faults/test_kill.py),
the gate, a reprocess, a DAG run and an s3a lake. Each test has a lake of its own, as runs of different projects'
lakes would on one engine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyspark
import pytest
from deltalake import DeltaTable

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from tests.support.backends import OnEngine
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference
from tests.support.stress import MILLPOND

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")


QUIET: dict = {"capture_output": True, "text": True, "timeout": 180}


def millpond(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([MILLPOND, *args], env=env, capture_output=True, text=True, timeout=timeout)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MILLPOND_FAULT", "SPARK_REMOTE")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[dict]:
    """`millpond engine start` on a lake of its own: the SPARK_REMOTE it prints, its state, its lake."""
    lake = tmp_path_factory.mktemp("engine-lake")
    # a catalog of its own: the worker's (tests/conftest.py) names the tables of other tests' lakes
    catalog = Path(tempfile.mkdtemp(prefix="millpond-catalog-"))
    catalog.chmod(0o755)
    env = clean_env(MILLPOND_LAKE=str(lake), MILLPOND_CATALOG_HOME=str(catalog / "home"))
    started = millpond(env, "engine", "start", timeout=240)
    assert started.returncode == 0, started.stderr[-3000:]
    remote = started.stdout.strip()
    state = json.loads((lake / "_system" / "engine" / "engine.json").read_text())
    yield {"remote": remote, "lake": lake, "env": env, "state": state}
    millpond(env, "engine", "stop", timeout=120)
    millpond(env, "catalog", "stop", timeout=120)
    shutil.rmtree(catalog, ignore_errors=True)


def run_env(lake: Path, engine: dict, **extra: str) -> dict[str, str]:
    return clean_env(MILLPOND_LAKE=str(lake), SPARK_REMOTE=engine["remote"], **extra)


def start_run(env: dict, pipeline: str = "activity") -> subprocess.Popen:
    return subprocess.Popen(
        [MILLPOND, "run", pipeline],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def versions(lake: Path) -> dict[str, int]:
    return {t: latest_version(paths.table_path(t, lake)) for t in TABLES} | {
        "bronze quarantine": latest_version(paths.quarantine_path("bronze.activity", lake))
    }


def test_start_prints_a_token_remote_on_localhost_and_status_reports_it(engine):
    remote, state = engine["remote"], engine["state"]
    assert remote.startswith(f"sc://localhost:{state['port']}/;token=") and len(state["token"]) >= 32
    path = engine["lake"] / "_system" / "engine" / "engine.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the token
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    listening = [c for c in psutil.Process(state["pid"]).net_connections() if c.status == psutil.CONN_LISTEN]
    assert [c.laddr.port for c in listening if c.laddr.port == state["port"]] == [state["port"]]
    assert {c.laddr.ip for c in listening if c.laddr.port == state["port"]} <= {"127.0.0.1", "::ffff:127.0.0.1"}
    shown = millpond(engine["env"], "engine", "status")
    assert shown.returncode == 0, shown.stderr
    assert f"up, pid {state['pid']}, port {state['port']}, code {state['fingerprint']}" in shown.stdout
    again = millpond(engine["env"], "engine", "start")  # the same code: the running engine is reused
    assert again.returncode == 0 and again.stdout.strip() == remote and "already up" in again.stderr


def test_a_client_without_the_token_is_refused(engine):
    """In a process of its own: a Connect session switches pyspark in its process to Connect for good."""
    base = engine["remote"].split(";")[0].rstrip("/")
    probe = (
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "try:\n"
        "    SparkSession.builder.remote(sys.argv[1]).create().range(1).collect()\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, str(exc)[:300])\n"
        "else:\n"
        "    print('ANSWERED')\n"
    )
    for remote, expected in ((base, "No authentication token"), (f"{base}/;token=" + "x" * 8, "Invalid")):
        answer = subprocess.run(
            [sys.executable, "-c", probe, remote], capture_output=True, text=True, timeout=120, env=clean_env()
        )
        assert "ANSWERED" not in answer.stdout and expected in answer.stdout, answer.stdout + answer.stderr[-2000:]
    answer = subprocess.run(
        [sys.executable, "-c", probe, engine["remote"]], capture_output=True, text=True, timeout=120, env=clean_env()
    )
    assert answer.stdout.strip() == "ANSWERED", answer.stdout + answer.stderr[-2000:]


IN_A_NOTEBOOK = """
import os, sys, threading, traceback
from pathlib import Path
from pyspark.sql.connect.session import SparkSession
from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.driver import runner

try:
    own = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).create()  # the notebook's session, made first
    own.range(1).collect()
    codes = [runner.main(["activity", "--run-id", "first"])]
    activity_files(Path(sys.argv[1]), 12, 30, duplicates=0.1, malformed=0.05, seed=7, start_index=12)  # hour 1 anew
    codes.append(runner.main(["activity", "--reprocess", "2026-11-01T01:00:00Z/2026-11-01T02:00:00Z"]))
    default = []  # another thread has no active session of its own: it finds the process's default
    finder = threading.Thread(target=lambda: default.append(SparkSession.active() is own))
    finder.start()
    finder.join()
    print("CODES", codes, "ACTIVE", SparkSession.getActiveSession() is own, "DEFAULT", default[0], flush=True)
    print("STILL ANSWERS", own.range(2).count(), flush=True)
except BaseException:
    traceback.print_exc()
finally:
    os._exit(0)  # the Connect client's threads would hold the interpreter open
"""


def test_runs_called_in_a_process_holding_its_own_connect_session_use_theirs_and_give_it_back(
    spark, lake, engine_server
):
    """A notebook on the engine calls the runner: the reprocess's client-side slices (silver's gated one, GX) must
    use the run's session, not the notebook's (they find it as the process's default), and the notebook's session
    is its process's own again afterwards."""
    landing = lake / "landing" / "activity"
    activity_files(landing, 48, 30, duplicates=0.05, malformed=0.02, seed=1)  # hours 0-3: the watermark passes 1
    done = subprocess.run(
        [sys.executable, "-c", IN_A_NOTEBOOK, str(landing)],
        env=run_env(lake, engine_server),
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = done.stdout + done.stderr
    assert "CODES [0, 0] ACTIVE True DEFAULT True" in done.stdout and "STILL ANSWERS 2" in done.stdout, said[-4000:]
    assert_matches_reference(spark, activity_reference(landing))


def test_a_terminated_run_releases_its_session_and_its_queries_stop(spark, lake, engine_server):
    landing = lake / "landing" / "activity"
    activity_files(landing, 3, 300, duplicates=0.05, malformed=0.02, seed=21)
    proc = start_run(run_env(lake, engine_server))
    deadline = time.monotonic() + 120
    while latest_version(paths.table_path("bronze.activity", lake)) < 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    OnEngine(engine_server).after_death()  # the server stopped the session's queries
    settled = versions(lake)
    time.sleep(1)
    assert versions(lake) == settled, "a batch was committed after the run was terminated"
    result = millpond(run_env(lake, engine_server), "run", "activity")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert_matches_reference(spark, activity_reference(landing))


def test_a_run_with_other_code_than_the_engine_refuses(lake, engine, tmp_path):
    """Another jar in the jar folder (a `make jars` after an upgrade, say) changes the code the run would need."""
    jars = tmp_path / "jars"
    shutil.copytree(engine_jars(), jars, symlinks=True)
    (jars / "an-upgrade.jar").write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    activity_files(lake / "landing" / "activity", 1, 100, seed=31)
    result = millpond(run_env(lake, engine, MILLPOND_JARS=str(jars)), "run", "activity")
    assert result.returncode == 5, result.stdout + result.stderr
    assert "runs other code than this run" in result.stderr
    assert "millpond engine stop && millpond engine start" in result.stderr
    assert latest_version(paths.table_path("bronze.activity", lake)) < 0  # nothing ran
    shown = millpond({**engine["env"], "MILLPOND_JARS": str(jars)}, "engine", "status")
    assert "STALE, jars changed since start" in shown.stdout


def test_a_bucket_lakes_run_on_an_engine_started_for_a_folder_lake_is_refused(engine, s3_bucket, tmp_path):
    """The engine fixture's lake is a folder, so the server has neither hadoop-aws nor s3a's settings: a run on a
    bucket lake refuses before anything runs (exit 5, naming the fix), where the table would fail on a missing
    S3AFileSystem class."""
    landed = activity_files(tmp_path / "landing", 1, 100, seed=41)
    s3_bucket.put_files(landed, "lake/landing/activity")
    result = millpond(
        clean_env(MILLPOND_LAKE=f"s3a://{s3_bucket.name}/lake", SPARK_REMOTE=engine["remote"]), "run", "activity"
    )
    assert result.returncode == 5, result.stdout + result.stderr
    assert "was started for a folder lake, without s3a's jars" in result.stderr, result.stderr
    assert "MILLPOND_LAKE=s3a://... millpond engine start" in result.stderr
    assert [key for key in s3_bucket.keys("lake/") if not key.startswith(("lake/landing/", "lake/_system/"))] == []


def test_the_clicks_pipeline_on_the_engine_equals_a_run_in_a_jvm_of_its_own(
    spark, tmp_path, monkeypatch, engine_server
):
    """A stream-stream join, a dimension lookup and gold aggregates: the same landed files run on the engine and in a
    JVM of the run's own (the test worker's session) give the same rows in every table (the time of ingestion
    aside)."""
    from millpond.cli import main as cli
    from millpond.spec import load_pipeline

    lakes = {side: tmp_path / side for side in ("engine", "own-jvm")}
    for seed in (1, 2):
        for side, lake in lakes.items():
            monkeypatch.setenv("MILLPOND_LAKE", str(lake))
            assert cli(["generate", "clicks", "--files", "1", "--rows", "300", "--seed", str(seed)]) == 0
            if side == "engine":
                result = millpond(run_env(lake, engine_server), "run", "clicks")
                assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
                assert "on the engine at" in result.stdout
            else:
                assert runner.main(["clicks"]) == 0
    for table_id in load_pipeline("clicks").tables:
        sides = []
        for lake in lakes.values():
            df = spark.read.format("delta").load(str(paths.table_path(table_id, lake))).drop("_ingested_at")
            rows = [tuple(v.replace(str(lake), "<lake>") if isinstance(v, str) else v for v in r) for r in df.collect()]
            sides.append(sorted(rows, key=repr))
        assert sides[0] == sides[1] and sides[0], table_id


SESSIONS_SEEN = """
import json, sys
from millpond.driver.session import connect_session
first, second = connect_session(sys.argv[1], 7), connect_session(sys.argv[1], 3)
first.range(3).createOrReplaceTempView("only_in_first")
first.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
print(json.dumps({
    "partitions": [first.conf.get("spark.sql.shuffle.partitions"), second.conf.get("spark.sql.shuffle.partitions")],
    "second_time_zone": second.conf.get("spark.sql.session.timeZone"),
    "view_in": [first.catalog.tableExists("only_in_first"), second.catalog.tableExists("only_in_first")],
}), flush=True)
first.stop()
second.stop()
"""


def test_each_run_has_a_session_of_its_own_and_pipelines_overlap(spark, lake, engine_server):
    """No conf or temporary view of one session is seen by another; a run of activity and one of clicks started
    together on one engine both finish, each with its own tables right."""
    seen = subprocess.run(  # its own process: one that opens a Connect session builds every Column for Connect
        [sys.executable, "-c", SESSIONS_SEEN, engine_server["remote"]],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert seen.returncode == 0, seen.stderr[-3000:]
    assert json.loads(seen.stdout.splitlines()[-1]) == {
        "partitions": ["7", "3"],
        "second_time_zone": "UTC",
        "view_in": [True, False],
    }

    landing = lake / "landing" / "activity"
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=41)
    env = run_env(lake, engine_server)
    landed = millpond(env, "generate", "clicks", "--files", "1", "--rows", "300", "--seed", "41")
    assert landed.returncode == 0, landed.stderr
    runs = {name: start_run(env, name) for name in ("activity", "clicks")}  # together
    outputs = {name: proc.communicate(timeout=900)[0] for name, proc in runs.items()}
    for name, proc in runs.items():
        assert proc.returncode == 0, f"{name}:\n{outputs[name][-3000:]}"
        assert "on the engine at" in outputs[name]
    assert_matches_reference(spark, activity_reference(landing))
    for source in ("impressions", "clicks"):  # every landed line, once
        landed_lines = sum(len(f.read_text().splitlines()) for f in (lake / "landing" / source).rglob("*.json"))
        table = spark.read.format("delta").load(str(paths.table_path(f"bronze.{source}", lake)))
        assert landed_lines and table.count() == landed_lines, source


def test_tables_by_name_on_the_engine_for_millpond_sql_a_connect_client_and_beeline(engine):
    """The engine opens the catalog (docs/sql.md): a run on it names the tables it made, `millpond sql` and `catalog
    sync` use it instead of a JVM of their own, and a notebook's Connect session and beeline over Spark Connect's JDBC
    driver see the same names."""
    lake, env = engine["lake"], engine["env"]
    activity_files(lake / "landing" / "activity", 2, 200, malformed=0.02, seed=3)
    ran = millpond(run_env(lake, engine), "run", "activity")
    assert ran.returncode == 0 and "named in the catalog: bronze.activity" in ran.stdout, ran.stdout[-3000:]
    expected = DeltaTable(str(lake / "gold" / "device_counts")).to_pyarrow_table().num_rows

    query = "SELECT count(*) AS n FROM gold.device_counts"  # named by the run itself: no sync before
    by_sql = millpond(env, "sql", query, "--format", "csv")
    assert (by_sql.returncode, by_sql.stdout) == (0, f"n\n{expected}\n"), by_sql.stderr[-3000:]
    assert "on the engine" in by_sql.stderr
    synced = millpond(env, "catalog", "sync")
    assert synced.returncode == 0 and "on the engine" in synced.stderr, synced.stderr[-3000:]
    assert synced.stdout.splitlines()[-1].startswith("catalog: 0 created, 0 replaced"), synced.stdout

    probe = "import sys\nfrom pyspark.sql import SparkSession\n"
    probe += "print(SparkSession.builder.remote(sys.argv[1]).create().sql(sys.argv[2]).collect()[0][0])\n"
    client = subprocess.run([sys.executable, "-c", probe, engine["remote"], query], **QUIET, env=clean_env())
    assert client.stdout.strip() == str(expected), client.stderr[-2000:]

    again = millpond(env, "engine", "start", "--jdbc")  # already up: prints where SQL clients connect
    assert "token=" not in again.stderr
    jdbc = again.stdout.strip().splitlines()[-1]
    assert jdbc.startswith("jdbc:sc://localhost:") and f";token={engine['state']['token']}" in jdbc
    beeline = [str(Path(pyspark.__file__).parent / "bin" / "beeline"), "--outputformat=csv2", "-e", query]
    client_env = clean_env(SPARK_CONNECT_BEELINE="1")
    answer = subprocess.run([*beeline, "-u", jdbc], **QUIET, env=client_env)
    assert f"n\n{expected}\n" in answer.stdout, answer.stdout + answer.stderr[-3000:]
    refused = subprocess.run([*beeline, "-u", jdbc.split(";")[0]], **QUIET, env=client_env)
    assert "UNAUTHENTICATED" in refused.stdout + refused.stderr and f"n\n{expected}" not in refused.stdout

    password = (Path(env["MILLPOND_CATALOG_HOME"]) / "password").read_text().strip()
    assert not [p.pid for p in psutil.process_iter(["cmdline"]) if password in " ".join(p.info["cmdline"] or [])]


def test_stop_ends_the_server_and_its_process_group(engine):
    pid = engine["state"]["pid"]
    stopped = millpond(engine["env"], "engine", "stop", timeout=120)
    assert stopped.returncode == 0 and f"pid {pid} stopped" in stopped.stdout
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    shown = millpond(engine["env"], "engine", "status")
    assert shown.returncode == 1 and "down" in shown.stdout


def engine_jars() -> Path:
    from millpond import settings

    return settings.jars_dir()
