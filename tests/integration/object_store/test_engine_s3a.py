"""The engine (`millpond engine`, Spark Connect) on a lake in a real S3 server: `millpond engine start` with
`MILLPOND_LAKE=s3a://...` keeps its state (with the token) in a local folder of the user, runs on it equal the
plain-Python reference, and a run SIGKILLed while its batch runs on the server commits nothing after its death: the
batch finds the run's lease no longer renewed and stops (millpond.engine.connect_batch).

Tables are read back by delta-rs (tests/support/lake_tables.py): the engine and the runs are the only JVMs.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from millpond.dev.sample_data import activity_files
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from millpond.runs import run_summary
from tests.support.lake_tables import assert_matches_reference_rs
from tests.support.reference import activity_reference
from tests.support.stress import MILLPOND, assert_nothing_left, start_run

pytestmark = [pytest.mark.integration, pytest.mark.long]

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")


@pytest.fixture
def engine_on_s3(s3_bucket, monkeypatch, tmp_path) -> Iterator[dict]:
    """An engine started for an s3a lake (a short lease, so a killed run's lease lapses soon), and SPARK_REMOTE
    naming it for every run the test starts."""
    monkeypatch.setenv("MILLPOND_LAKE", f"s3a://{s3_bucket.name}/lake")
    monkeypatch.setenv("MILLPOND_LEASE_SECONDS", "15")  # a live run's renewal has a sixth of it to land
    monkeypatch.delenv("MILLPOND_FAULT", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    # The engine has a state folder of its own, as another user or container would: the runs never see it.
    engine_env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "engine-state")}
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "run-state"))
    started = subprocess.run([MILLPOND, "engine", "start"], env=engine_env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        monkeypatch.setenv("SPARK_REMOTE", started.stdout.strip().splitlines()[-1])
        monkeypatch.setenv("XDG_STATE_HOME", engine_env["XDG_STATE_HOME"])
        folder = paths.engine_dir()
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "run-state"))
        yield {"bucket": s3_bucket, "env": engine_env, "folder": folder}
    finally:
        monkeypatch.delenv("SPARK_REMOTE")
        subprocess.run([MILLPOND, "engine", "stop"], env=engine_env, capture_output=True, timeout=120)


def land(bucket, local: Path, files: int, seed: int) -> None:
    before = set(local.glob("*.json"))
    activity_files(local, files, 300, duplicates=0.05, malformed=0.02, seed=seed)
    bucket.put_files(sorted(set(local.glob("*.json")) - before), "lake/landing/activity")


def versions() -> dict[str, int]:
    return {t: latest_version(paths.table_path(t)) for t in TABLES}


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=900)
    return proc.returncode, out


def test_runs_on_the_engine_over_an_s3a_lake_equal_the_reference_and_a_killed_run_commits_nothing_after(
    engine_on_s3, tmp_path
):
    bucket, local = engine_on_s3["bucket"], tmp_path / "landing"
    local.mkdir()
    folder, key = engine_on_s3["folder"], os.environ["AWS_SECRET_ACCESS_KEY"]
    state = folder / "engine.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600 and str(state).startswith(str(tmp_path / "engine-state"))
    assert bucket.keys("lake/_system/engine") == []  # the token never goes to the bucket
    server = psutil.Process(json.loads(state.read_text())["pid"])
    for process in (server, *server.children(recursive=True)):  # spark-submit's JVM and its Python workers
        try:
            command = process.cmdline()
        except psutil.Error:  # a helper process that ended meanwhile
            continue
        assert key not in " ".join(command), command[:3]
    lake = str(paths.lake_root())

    land(bucket, local, 2, seed=1)
    code, out = finish(start_run(lake))  # type: ignore[arg-type]
    assert code == 0, out[-4000:]
    assert "millpond: on the engine at sc://localhost:" in out and "driver JIT" not in out  # no JVM of its own
    assert_matches_reference_rs(activity_reference(local))
    summary = run_summary.latest("activity")
    assert summary is not None
    bronze = next(t for t in summary["tables"] if t["table"] == "bronze.activity")
    assert bronze["rows_in"] == 600  # counted in the server's batch worker, reported through the bucket
    silver = next(t for t in summary["tables"] if t["table"] == "silver.activity")
    assert silver["gate"]["outcome"] == "passed"
    assert bucket.keys("lake/_system/engine_runs/") == []  # the batches' reports removed with the session

    # The fault point is reached in the server's batch worker, which SIGKILLs the run's process there.
    land(bucket, local, 1, seed=2)
    before = versions()
    proc = start_run(lake, "silver.activity:before_write")  # type: ignore[arg-type]
    code, out = finish(proc)
    assert code == -signal.SIGKILL, f"expected the run SIGKILLed in silver's batch, got {code}:\n{out[-3000:]}"
    assert_nothing_left(proc)
    killed = versions()
    assert killed["silver.activity"] == before["silver.activity"], "silver committed the batch of a dead run"
    log, deadline = folder / "engine.log", time.monotonic() + 90
    while "has not renewed its lease" not in log.read_text(errors="replace"):  # the batch's check, in the server
        assert time.monotonic() < deadline, "the engine's batch never found its run gone:\n" + log.read_text()[-3000:]
        time.sleep(1)
    time.sleep(3)
    assert versions() == killed, "a batch was committed on the engine after its run was killed"
    assert (folder / "locks" / "activity.commit.lock").is_file()  # the batches' commit lock: the engine's folder

    land(bucket, local, 1, seed=3)
    code, out = finish(start_run(lake, None, ("--wait", "60")))  # type: ignore[arg-type]
    assert code == 0, out[-4000:]
    assert_matches_reference_rs(activity_reference(local))  # the killed run's batch replayed once
    idle = subprocess.run([MILLPOND, "run", "activity"], capture_output=True, text=True, timeout=300)
    assert idle.returncode == 0 and "no Spark application started" in idle.stdout, idle.stdout[-3000:]

    shown = subprocess.run(
        [MILLPOND, "engine", "status", "--json"], env=engine_on_s3["env"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and json.loads(shown.stdout)["up"] is True, shown.stderr
    assert key not in log.read_text(errors="replace")
