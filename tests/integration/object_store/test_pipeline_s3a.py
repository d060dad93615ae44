"""The activity pipeline with `MILLPOND_LAKE=s3a://...` against a real S3 server, through real `millpond run`
processes: rounds of files landed with the object-store client, SIGKILLs mid-run, reruns, the plain-Python
reference, the gate, `millpond status` and `millpond check`, on both backends (a JVM of the run's own, and the
engine, whose batches stop once a killed run's lease is no longer renewed: millpond.driver.connect_batch); and,
with a JVM of its own, a run whose lease is taken over.

Tables are read back by delta-rs (tests/support/lake_tables.py): the runs and the engine are the only JVMs.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from deltalake import DeltaTable

from millpond.dev.sample_data import activity_files, land_file
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from millpond.lake.storage import delta_rs_location
from millpond.runs import reports, run_summary
from tests.support.backends import Backend, OwnJvm
from tests.support.lake_tables import assert_matches_reference_rs, read_rs, snapshot_rs
from tests.support.reference import activity_reference
from tests.support.stress import MILLPOND, assert_nothing_left, start_run

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")
LEASE_SECONDS = "8"  # a SIGKILLed run's lease lapses this soon; the next run waits for it (--wait)


@pytest.fixture
def s3_lake(s3_bucket, monkeypatch):
    url = f"s3a://{s3_bucket.name}/lake"
    monkeypatch.setenv("MILLPOND_LAKE", url)
    monkeypatch.setenv("MILLPOND_LEASE_SECONDS", LEASE_SECONDS)
    return s3_bucket


def land(bucket, local: Path, files: int, seed: int, **bad) -> None:
    """Files made in a local folder (the reference reads it), put into the bucket's landing prefix by boto3."""
    before = set(local.glob("*.json"))
    activity_files(local, files, 300, duplicates=0.05, malformed=0.02, seed=seed, **bad)
    put_new(bucket, local, before)


def put_new(bucket, local: Path, before: set[Path]) -> None:
    bucket.put_files(sorted(set(local.glob("*.json")) - before), "lake/landing/activity")


def run(lake: str, fault: str | None = None, *args: str, backend: Backend | None = None) -> tuple[int, str]:
    """A `millpond run` process (on `backend`, a JVM of its own by default) that waits for a killed run's lease."""
    backend = backend or OwnJvm()
    proc = backend.start("--wait", "60", *args, fault=fault)
    out, _ = proc.communicate(timeout=900)
    if fault:
        assert proc.returncode == -signal.SIGKILL, (
            f"expected a SIGKILL at {fault}, got {proc.returncode}:\n{out[-3000:]}"
        )
        assert_nothing_left(proc)
        backend.after_death()
    return proc.returncode, out


LEASE_KEY = "lake/_system/locks/activity.lease"


def read_lease(bucket) -> dict | None:
    """The lease record in the bucket, or None before any run wrote one."""
    s3 = bucket.client()
    try:
        return json.loads(s3.get_object(Bucket=bucket.name, Key=LEASE_KEY)["Body"].read())
    except s3.exceptions.NoSuchKey:  # the class belongs to the client that raised it
        return None


def write_lease(bucket, record: dict) -> None:
    bucket.client().put_object(Bucket=bucket.name, Key=LEASE_KEY, Body=json.dumps(record).encode())


def take_lease_over(bucket, held: dict, nonce: str) -> dict:
    """Another holder's record in place of `held` (as one writes it once a lease lapsed): run `other`, one
    generation on."""
    thief = held | {"generation": held["generation"] + 1, "run_id": "other", "pid": 1, "nonce": nonce}
    write_lease(bucket, thief)
    return thief


def versions() -> dict[str, int]:
    return {t: latest_version(paths.table_path(t)) for t in TABLES}


def empty_commits(table: str) -> list[int]:
    """The table's versions that added no file and changed nothing else: what an empty append commits (a batch that
    only advanced a watermark must commit nothing at all). The first version may be empty: it creates the table."""
    log = paths.table_path(table) / "_delta_log"
    empty = []
    for commit in sorted(log.glob("*.json"), key=str):
        actions = {next(iter(json.loads(line))) for line in commit.read_text().splitlines() if line.strip()}
        if not actions & {"add", "remove", "metaData", "protocol"}:
            empty.append(int(commit.name.split(".")[0]))
    return empty


def test_activity_rounds_with_sigkills_equal_the_reference_then_the_gate_stops_gold(
    s3_lake, tmp_path, monkeypatch, backend
):
    monkeypatch.setenv("MILLPOND_LEASE_SECONDS", backend.lease_seconds)
    lake, local = str(paths.lake_root()), tmp_path / "landing"
    local.mkdir()
    on_engine = backend.name == "engine"
    engine_log = backend.log.read_text(errors="replace") if on_engine else ""

    land(s3_lake, local, 2, seed=1)
    run(lake, "bronze.activity:after_write", backend=backend)  # bronze committed, not Spark's commit log
    land(s3_lake, local, 1, seed=2)
    before = versions()
    run(lake, "silver.activity:before_write", backend=backend)
    assert versions()["silver.activity"] == before["silver.activity"], "silver committed the batch of a dead run"
    if on_engine:  # the batch's check, in the server, found the killed run's lease no longer renewed
        assert "has not renewed its lease" in backend.log.read_text(errors="replace")[len(engine_log) :]
        # ... under the commit flock in a folder of the engine's machine for this lake, not in the bucket
        # (backend.folder is <the engine's state home>/millpond/drivers/<its own lake>).
        monkeypatch.setenv("XDG_STATE_HOME", str(backend.folder.parents[2]))
        assert paths.commit_lock_path("activity").is_file()
    land(s3_lake, local, 1, seed=3)
    killed_reports = set(s3_lake.keys("lake/_system/engine_runs/"))  # a SIGKILLed client cannot remove its own
    code, out = run(lake, backend=backend)
    assert code == 0, out[-3000:]
    backend.assert_ran_here(out)
    assert_matches_reference_rs(activity_reference(local))  # each round's rows once: counts and every key
    runs = run_summary.latest("activity")
    assert runs is not None and {t["table"] for t in runs["tables"]} == set(TABLES)
    bronze = next(t for t in runs["tables"] if t["table"] == "bronze.activity")
    assert bronze["rows_in"] == 300  # the round landed last (counted on the engine in the server's batch worker)
    # Gated silver's batch that only advances its watermark runs but commits no empty Delta version.
    silver = next(t for t in runs["tables"] if t["table"] == "silver.activity")
    assert silver["micro_batches"] > silver["version_after"] - silver["version_before"], silver
    assert empty_commits("silver.activity") == []
    # The run's batch reports on the engine are removed with its session; only those of the killed runs stay.
    assert set(s3_lake.keys("lake/_system/engine_runs/")) <= killed_reports

    code, out = run(lake, backend=backend)  # nothing new: decided from S3 listings, no JVM
    assert code == 0 and "no table has anything new: no Spark application started" in out, out[-3000:]
    assert_matches_reference_rs(activity_reference(local))

    code, said, err = backend.process("status", "activity")
    assert code == 0, err
    for table in TABLES:
        assert f"{paths.table_path(table)} " in said
    assert f"{len(activity_reference(local).bronze)}" in said

    # A blocking expectation fails: bronze ingests, silver and gold stay as they were, the report is in the bucket.
    before, tables = versions(), snapshot_rs()
    before_files = set(local.glob("*.json"))
    land_file(local, "flying.json", [json.dumps(fly(i)) for i in range(3)])
    put_new(s3_lake, local, before_files)
    code, out = run(lake, None, "--run-id", "fly-1", backend=backend)
    assert code == 4, out[-3000:]
    assert "data-quality gate FAILED for silver.activity" in out
    after = versions()
    assert after["bronze.activity"] == before["bronze.activity"] + 1
    assert {t: after[t] for t in TABLES[1:]} == {t: before[t] for t in TABLES[1:]} and snapshot_rs() == tables
    summary = run_summary.load("activity", "fly-1")
    assert summary is not None
    gate = {t["table"]: t for t in summary["tables"]}["silver.activity"]["gate"]
    assert gate["report_path"].startswith(f"{lake}/_reports/datadocs/")
    assert paths.as_lake_path(gate["report_path"]).is_file() and paths.as_lake_path(gate["index_path"]).is_file()
    assert {t["table"]: t["outcome"] for t in summary["tables"]}["gold.device_counts"] == "skipped"

    # `millpond check` sees the slice silver has not committed and fails the same way, writing only its report.
    code, said, err = backend.process("check", "activity", "--table", "silver.activity")
    assert code == 4, (said + err)[-3000:]
    assert "unexpected" in err and [e["outcome"] for e in reports.history() if e["mode"] == "check"] == ["failed"]
    assert versions() == after and snapshot_rs() == tables
    if on_engine:
        assert_the_engines_secrets_stay_local(backend, s3_lake)
        return
    # `millpond preview` (a JVM of its own on either backend) shows a batch of it and leaves the bucket as it was.
    keys = s3_lake.keys("lake/")
    preview = subprocess.run(
        [MILLPOND, "preview", "activity", "silver.activity", "--batches", "1", "--rows", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert "batch 0: " in preview.stdout and "stopped after 1 micro-batch" in preview.stdout, preview.stdout[-3000:]
    assert s3_lake.keys("lake/") == keys

    # The catalog names an object-store lake's tables at their s3a:// paths (`millpond catalog sync`, a Hive-backed
    # JVM with s3a's jars and the store's settings), and `millpond sql` counts them by name as delta-rs does, the
    # quarantine and the run history included; neither writes to the bucket.
    synced = subprocess.run([MILLPOND, "catalog", "sync"], capture_output=True, text=True, timeout=600)
    assert synced.returncode == 0, synced.stderr[-3000:]
    assert any(line.split()[-1] == "gold.device_counts" for line in synced.stdout.splitlines()), synced.stdout
    query = (
        "SELECT (SELECT count(*) FROM silver.activity) AS silver, (SELECT count(*) FROM gold.device_counts) AS gold, "
        "(SELECT count(*) FROM bronze.activity_quarantine) AS quarantined, "
        "(SELECT count(*) FROM millpond_system.runs) AS runs"
    )
    event_log, options = delta_rs_location(paths.system_path("event_log"))
    counted = subprocess.run([MILLPOND, "sql", query, "--format", "json"], capture_output=True, text=True, timeout=600)
    assert counted.returncode == 0, counted.stderr[-3000:]
    assert json.loads(counted.stdout) == [
        {
            "silver": read_rs("silver.activity").num_rows,
            "gold": read_rs("gold.device_counts").num_rows,
            "quarantined": read_rs("bronze.activity_quarantine").num_rows,
            "runs": DeltaTable(event_log, storage_options=options).to_pyarrow_table().num_rows,
        }
    ]
    assert s3_lake.keys("lake/") == keys


def assert_the_engines_secrets_stay_local(backend, bucket) -> None:
    """The engine's token stays in its own state folder (its owner's only), never in a bucket; the store's key is
    on no command line of the server or its workers, and not in its log."""
    state, key = backend.folder / "engine.json", os.environ["AWS_SECRET_ACCESS_KEY"]
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert bucket.keys("lake/_system/engine/") == [] and bucket.keys("lake/_system/engine.json") == []
    server = psutil.Process(json.loads(state.read_text())["pid"])
    for process in (server, *server.children(recursive=True)):  # spark-submit's JVM and its Python workers
        try:
            command = process.cmdline()
        except psutil.Error:  # a helper process that ended meanwhile
            continue
        assert key not in " ".join(command), command[:3]
    assert key not in backend.log.read_text(errors="replace")


def fly(index: int) -> dict:
    return {
        "Recorded_At": f"2026-11-01T00:{index:02d}:00.000Z",
        "Device": "s3_7",
        "Index": 7000 + index,
        "Model": "nexus4",
        "User": "a",
        "gt": "fly",
        "x": 0.5,
        "y": -0.5,
        "z": 9.8,
    }


def test_a_lease_taken_over_mid_batch_stops_that_batchs_commit_and_the_next_run_replays_it(
    s3_lake, tmp_path, monkeypatch
):
    """The fence inside a micro-batch: the run pauses in silver's first batch (offsets logged, nothing written),
    another holder takes the lease, and the batch's commit is refused (exit 3, silver has no version); once that
    holder releases, the next run replays the batch and every table equals the reference."""
    lake, local = str(paths.lake_root()), tmp_path / "landing"
    local.mkdir()
    land(s3_lake, local, 1, seed=6)
    marker = tmp_path / "paused"
    monkeypatch.setenv("MILLPOND_FAULT_PAUSE_FILE", str(marker))
    proc = start_run(lake, "silver.activity:before_write:0", ("--wait", "60"))  # type: ignore[arg-type]
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the run never reached silver's first batch"
        time.sleep(0.2)
    assert versions()["bronze.activity"] == 0 and versions()["silver.activity"] == -1
    held = read_lease(s3_lake)
    assert held is not None, "the paused run holds no lease"
    thief = take_lease_over(s3_lake, held, nonce="y")
    marker.unlink()
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 3, out[-3000:]
    assert "lost its lease" in out and "run other" in out, out[-3000:]
    assert versions()["silver.activity"] == -1, "the batch committed after its run lost the lease"

    monkeypatch.delenv("MILLPOND_FAULT_PAUSE_FILE")
    write_lease(s3_lake, thief | {"state": "released", "nonce": "z"})
    code, out = run(lake)
    assert code == 0, out[-3000:]
    assert_matches_reference_rs(activity_reference(local))


def test_a_run_whose_lease_is_taken_over_stops_and_writes_nothing(s3_lake, tmp_path):
    """Another holder takes the lease while the run starts its JVM (as after a pause longer than the lease's
    time): the run's fencing check before its first commit fails, so no table, event-log row or summary is written."""
    lake, local = str(paths.lake_root()), tmp_path / "landing"
    local.mkdir()
    land(s3_lake, local, 1, seed=5)
    proc = start_run(lake, None, ("--run-id", "paused"))  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while True:
        held = read_lease(s3_lake)
        if held and held["state"] == "held" and held["run_id"] == "paused":
            break
        assert time.monotonic() < deadline and proc.poll() is None, "the run never took its lease"
        time.sleep(0.2)
    take_lease_over(s3_lake, held, nonce="x")
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 3, out[-3000:]
    assert "lost its lease" in out and "run other" in out and "This run must not commit" in out
    assert versions() == dict.fromkeys(TABLES, -1)
    assert s3_lake.keys("lake/_checkpoints/") == [] and s3_lake.keys("lake/bronze/") == []
    assert latest_version(paths.event_log_path()) == -1
    assert run_summary.load("activity", "paused") is None
    assert (read_lease(s3_lake) or {}).get("run_id") == "other"
