"""`millpond engine`: a Spark Connect server runs use through SPARK_REMOTE. Runs on it equal the plain-Python
reference, a killed run commits nothing after its death, and a run whose code differs from the engine's refuses.

One engine serves the whole module (it takes ~15 s to start); each test has a lake of its own, as runs of
different projects' lakes would on one engine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from millpond.dev.sample_data import activity_files
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from tests.support.lake_tables import assert_matches_reference, data_commits_without_txn
from tests.support.reference import activity_reference
from tests.support.stress import MILLPOND

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")


def millpond(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([MILLPOND, *args], env=env, capture_output=True, text=True, timeout=timeout)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MILLPOND_FAULT", "SPARK_REMOTE")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[dict]:
    """`millpond engine start` on a lake of its own: the SPARK_REMOTE it prints, its state, its lake."""
    lake = tmp_path_factory.mktemp("engine-lake")
    env = clean_env(MILLPOND_LAKE=str(lake))
    started = millpond(env, "engine", "start", timeout=240)
    assert started.returncode == 0, started.stderr[-3000:]
    remote = started.stdout.strip()
    state = json.loads((lake / "_system" / "engine" / "engine.json").read_text())
    yield {"remote": remote, "lake": lake, "env": env, "state": state}
    millpond(env, "engine", "stop", timeout=120)


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


def versions_after_death(lake: Path, what: str) -> dict[str, int]:
    """The tables' versions once a commit already under way when the run died has had 2 s to finish, and the same
    15 s later, when the server's query would have written its next commit: no later commit may start."""
    time.sleep(2)
    settled = versions(lake)
    time.sleep(15)
    assert versions(lake) == settled, f"a batch was committed after {what}"
    return settled


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


def test_a_state_file_others_may_read_is_not_trusted(tmp_path):
    from millpond.engine import connect_server

    folder = tmp_path / "_system" / "engine"
    folder.mkdir(parents=True)
    (folder / "engine.json").write_text("{}")
    os.chmod(folder / "engine.json", 0o644)
    with pytest.raises(connect_server.EngineError, match="not trusted"):
        connect_server.read_state(tmp_path)


def test_runs_on_the_engine_equal_the_reference(spark, lake, engine):
    landing = lake / "landing" / "activity"
    env = run_env(lake, engine)
    for seed in (1, 2, 3):
        activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=seed)
        started = time.monotonic()
        result = millpond(env, "run", "activity")
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        assert "millpond: on the engine at sc://localhost:" in result.stdout
        assert "driver JIT" not in result.stdout  # no JVM of its own
        print(f"round {seed} on the engine: {time.monotonic() - started:.1f} s")
        assert_matches_reference(spark, activity_reference(landing))
    summary = json.loads(sorted((lake / "_system" / "runs" / "activity").glob("*.json"))[-1].read_text())
    bronze = next(t for t in summary["tables"] if t["table"] == "bronze.activity")
    assert bronze["micro_batches"] >= 1 and bronze["rows_in"] == 600  # counted in the server's batch worker
    silver = next(t for t in summary["tables"] if t["table"] == "silver.activity")
    assert silver["gate"]["outcome"] == "passed"  # the gate's result came back from the server too
    assert not (lake / "_system" / "engine_runs").exists() or not any((lake / "_system" / "engine_runs").iterdir())
    idle = millpond(env, "run", "activity")
    assert idle.returncode == 0 and "no Spark application started" in idle.stdout
    assert data_commits_without_txn(lake) == []


IN_A_NOTEBOOK = """
import os, sys, threading, traceback
from pathlib import Path
from pyspark.sql.connect.session import SparkSession
from millpond.dev.sample_data import activity_files
from millpond.engine import runner

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


def test_runs_called_in_a_process_holding_its_own_connect_session_use_theirs_and_give_it_back(spark, lake, engine):
    """A notebook on the engine calls the runner: the reprocess's client-side slices (silver's gated one, GX) must
    use the run's session, not the notebook's (they find it as the process's default), and the notebook's session
    is its process's own again afterwards."""
    landing = lake / "landing" / "activity"
    activity_files(landing, 48, 30, duplicates=0.05, malformed=0.02, seed=1)  # hours 0-3: the watermark passes 1
    done = subprocess.run(
        [sys.executable, "-c", IN_A_NOTEBOOK, str(landing)],
        env=run_env(lake, engine),
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = done.stdout + done.stderr
    assert "CODES [0, 0] ACTIVE True DEFAULT True" in done.stdout and "STILL ANSWERS 2" in done.stdout, said[-4000:]
    assert_matches_reference(spark, activity_reference(landing))


def test_a_killed_run_commits_nothing_after_its_death_and_a_rerun_equals_the_reference(spark, lake, engine):
    """The fault points of a batch are reached in the server's batch worker, which SIGKILLs the run's own process
    there: the batch must then stop before its next commit, though the server lives on."""
    landing = lake / "landing" / "activity"
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=11)
    for fault in ("bronze.activity:before_write", "bronze.activity:between_writes", "silver.activity:before_write"):
        before = versions(lake)
        proc = start_run(run_env(lake, engine, MILLPOND_FAULT=fault))
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == -signal.SIGKILL, f"expected the run SIGKILLed at {fault}:\n{out[-3000:]}"
        killed = versions_after_death(lake, f"the run was killed at {fault}")
        if fault.endswith("before_write"):
            table = fault.split(":")[0]
            assert killed[table] == before[table], f"{table} committed the batch of a run killed before writing"
        activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=12 + len(before))
    # The whole process group at a moment of the run, as a task's kill would.
    proc = start_run(run_env(lake, engine))
    time.sleep(6)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    versions_after_death(lake, "the run's process group was killed")

    result = millpond(run_env(lake, engine), "run", "activity")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert_matches_reference(spark, activity_reference(landing))
    assert data_commits_without_txn(lake) == []


def test_a_terminated_run_releases_its_session_and_its_queries_stop(spark, lake, engine):
    landing = lake / "landing" / "activity"
    activity_files(landing, 3, 300, duplicates=0.05, malformed=0.02, seed=21)
    proc = start_run(run_env(lake, engine))
    deadline = time.monotonic() + 120
    while latest_version(paths.table_path("bronze.activity", lake)) < 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    versions_after_death(lake, "the run was terminated")
    result = millpond(run_env(lake, engine), "run", "activity")
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


@pytest.mark.long
def test_the_clicks_pipeline_on_the_engine_equals_a_run_in_a_jvm_of_its_own(spark, tmp_path, engine):
    """A stream-stream join, a dimension lookup and gold aggregates: the same landed files run on the engine and in a
    JVM of the run's own give the same rows in every table (the time of ingestion aside)."""
    from millpond.spec import load_pipeline

    lakes = {side: tmp_path / side for side in ("engine", "own-jvm")}
    for seed in (1, 2):
        for side, lake in lakes.items():
            env = clean_env(MILLPOND_LAKE=str(lake))
            landed = millpond(env, "generate", "clicks", "--files", "1", "--rows", "300", "--seed", str(seed))
            assert landed.returncode == 0, landed.stderr
            if side == "engine":
                env = run_env(lake, engine)
            result = millpond(env, "run", "clicks")
            assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
            assert ("on the engine at" in result.stdout) == (side == "engine")
    for table_id in load_pipeline("clicks").tables:
        sides = []
        for lake in lakes.values():
            df = spark.read.format("delta").load(str(paths.table_path(table_id, lake))).drop("_ingested_at")
            rows = [tuple(v.replace(str(lake), "<lake>") if isinstance(v, str) else v for v in r) for r in df.collect()]
            sides.append(sorted(rows, key=repr))
        assert sides[0] == sides[1] and sides[0], table_id


SESSIONS_SEEN = """
import json, sys
from millpond.engine.session import connect_session
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


def test_each_run_has_a_session_of_its_own_and_pipelines_overlap(spark, lake, engine):
    """No conf or temporary view of one session is seen by another; a run of activity and one of clicks started
    together on one engine both finish, each with its own tables right."""
    seen = subprocess.run(  # its own process: one that opens a Connect session builds every Column for Connect
        [sys.executable, "-c", SESSIONS_SEEN, engine["remote"]],
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
    env = run_env(lake, engine)
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
