"""`make up` / `make down` against the real thing, walked once by a newcomer and an operator: one Airflow home,
`make up` twice (a fresh lake, then a moved one), driven over HTTP and with the official Airflow REST client
(`apache-airflow-client`), and checked in the process table.

1. `make up` on a fresh lake starts `airflow standalone` (and the engine, `make up`'s default) in its own process
   group with login required and prints the URL and the generated admin password; Airflow's metadata database is
   a database of its own on the catalog's PostgreSQL (no SQLite file), where its runs are, and which
   `millpond catalog stop` will not pull from under it; the millpond plugin's report
   pages sit behind the same login; DAGs are unpaused at creation, so the activity pipeline's latest interval runs.
2. Every DAG `make up` leaves unpaused gets its first scheduled run green on a lake where nothing has landed yet; the
   Kafka example, whose broker address is not set, is left paused and says why; a trigger without a logical date
   (the API's default) and one with a logical date both succeed, and the run summary records "none" and the
   interval; a backfill of two intervals succeeds run by run. The freshness sentinel's first scheduled run alerts
   activity's gold tables and the paused device_status DAG's silver.device_status stale (nothing written yet)
   through the notifier `MILLPOND_ALERT_FILE` names, once: a check while activity's DAG is paused too sends nothing
   more; once they are written (device_status's by hand, its DAG still paused), a check sends one "recovered" each.
   The run's OpenLineage events (make up's default file transport) are children of the provider's task runs.
3. `make down` while a task runs stops that whole group and nothing is left: no process of this AIRFLOW_HOME or
   this lake, no PostgreSQL, nothing on the ports; a second `make down` is harmless.
4. `make up` again on a moved lake (same Airflow home and database, its PostgreSQL started again, the earlier runs
   still listed): a triggered run succeeds there; then backfills
   that reprocess, through the REST API: one hour re-delivered with corrected content under the same names and a
   backfill of it with default settings rebuilds it in every table (each then equal to the plain-Python reference
   over the landing files as they are now); a later round is ingested exactly once; a daily backfill of the hourly
   pipeline (`activity__reprocess`) rebuilds a whole day in one run; a manual run with a logical date and
   `{"reprocess": true}` rebuilds its interval; `{"reprocess": false}` keeps a backfill to draining what is new.

The four tests walk one stack in order, each from where the previous one left it (two `make up`s where there were
four, docs/testing.md). Isolation: a throwaway AIRFLOW_HOME and lakes, and ports picked free on 127.0.0.1 (the API
port plus the two log-server ports that scheduler and triggerer would otherwise open on 8793/8794). `-o setup`: the
venv and jars are not rebuilt under a running test session (pip would reinstall millpond in the very venv pytest
runs from).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psutil
import pytest

from millpond.catalog import database
from millpond.dev.sample_data import SECONDS_PER_FILE, activity_files, campaigns_file, clicks_files
from millpond.lake.delta_log import table_state
from millpond.runs import reports, run_summary
from millpond.spec import load_pipeline
from tests.support import REPO
from tests.support.airflow_run import group_alive, spark_processes, wait_for
from tests.support.lake_tables import assert_matches_reference
from tests.support.lineage import assert_children_of_airflow_tasks, events_in, table_events
from tests.support.millpond_cli import sql_rows
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

MAKE = ["make", "--no-print-directory", "-o", "setup"]
DONE = {"success", "failed"}
FILES_PER_HOUR = 3600 // SECONDS_PER_FILE
DAY = datetime(2026, 11, 1, tzinfo=UTC)


def device_status_row():
    """One row of silver.device_status as its spec's output_schema types it, in Arrow."""
    import pyarrow as pa

    return pa.table(
        {
            "device_id": ["d1"],
            "status": ["ok"],
            "battery": [80.0],
            "last_event_time": pa.array([datetime.now(UTC)], pa.timestamp("us", tz="UTC")),
            "events": pa.array([1], pa.int64()),
        }
    )


def free_ports(n: int) -> list[int]:
    """n distinct ports nobody listens on (all bound at once so the kernel cannot hand one out twice)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def home_processes(home: Path) -> list[psutil.Process]:
    """Every live process started with this AIRFLOW_HOME in its environment."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AIRFLOW_HOME") == str(home) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} pgid={os.getpgid(p.pid)} {' '.join(p.cmdline())[:160]}")
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return out


# How docs/airflow.md tells a user to point the `airflow` command at `make up`'s database.
AIRFLOW_CLI_RECIPE = 'export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD="cat \'$(millpond catalog airflow-db --airflow-home "${AIRFLOW_HOME:-$PWD/airflow_home}")\'"'


def runs_in_postgres(stack: dict, dag_id: str) -> int:
    """The DAG's runs as Airflow's metadata database holds them, read with psql as the role `make up` made for it."""
    url_file = stack["catalog"] / f"{database.airflow_database_name(stack['home'])}.url"
    url = urllib.parse.urlsplit(url_file.read_text())
    assert url.scheme == "postgresql+psycopg2" and url.hostname == "127.0.0.1" and url.password, url.scheme
    done = subprocess.run(
        [database.binary("psql"), "-h", url.hostname, "-p", str(url.port), "-U", str(url.username)]
        + ["-d", url.path.lstrip("/"), "-tAc", f"SELECT count(*) FROM dag_run WHERE dag_id = '{dag_id}'"],
        capture_output=True,
        text=True,
        env={**os.environ, "PGPASSWORD": url.password},
        check=True,
    )
    return int(done.stdout)


def make(target: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([*MAKE, target], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """One `make up` home for the module's walk: its ports, its lake (a moved lake is a folder beside it)."""
    root = tmp_path_factory.mktemp("make-up")
    home, lake = root / "airflow_home", root / "lake"
    # The catalog's PostgreSQL (Airflow's database too) of this walk: not under pytest's owner-only folders, which
    # the server's account (`nobody`, as root) cannot enter.
    catalog_parent = Path(tempfile.mkdtemp(prefix="millpond-make-up-"))
    catalog_parent.chmod(0o755)
    catalog = catalog_parent / "catalog"
    port, worker_logs, trigger_logs = free_ports(3)
    # Only what a user would have: no AIRFLOW_*/MILLPOND_* of this session, no make state of an outer make.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "MILLPOND_", "PYSPARK", "SPARK_", "MAKE", "MFLAGS", "OPENLINEAGE"))
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "MILLPOND_LAKE": str(lake),
            "MILLPOND_CATALOG_HOME": str(catalog),
            "AIRFLOW_PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_logs),
            "AIRFLOW__CORE__PARALLELISM": "2",
            # A 500 from the API carries its statement and error, not only an id to look for in the server's log.
            "AIRFLOW__API__EXPOSE_STACKTRACE": "True",
            "MILLPOND_ALERT_FILE": str(root / "alerts.jsonl"),
        }
    )
    assert not accepts(port)
    info = {
        "env": env,
        "home": home,
        "lake": lake,
        "port": port,
        "ports": (port, worker_logs, trigger_logs),
        "alerts": root / "alerts.jsonl",
        "catalog": catalog,
    }
    try:
        yield info
    finally:
        # Always: make down (idempotent) for either lake, then SIGKILL whatever of this home survived it, process
        # group first.
        lakes = (lake, lake.parent / "moved-lake")
        for each in lakes:
            try:
                make("down", {**env, "MILLPOND_LAKE": str(each)}, timeout=90)
            except subprocess.TimeoutExpired:
                pass
        pgid_file = home / "airflow.pgid"
        pgids = {int(pgid_file.read_text())} if pgid_file.exists() else set()
        for proc in home_processes(home) + [p for each in lakes for p in spark_processes(each)]:
            try:
                pgids.add(os.getpgid(proc.pid))
                proc.kill()
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        for pgid in pgids - {os.getpgid(0)}:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not home_processes(home), timeout=10)
        # make down stopped the catalog's server; this is for a walk that ended before its make down did.
        subprocess.run(
            [sys.executable, "-m", "millpond.cli", "catalog", "stop", "--force"], env=env, capture_output=True
        )
        shutil.rmtree(catalog_parent, ignore_errors=True)


def test_make_up_serves_the_dags_behind_a_login_and_runs_the_latest_interval(stack):
    env, home, lake, port = stack["env"], stack["home"], stack["lake"], stack["port"]
    base = f"http://127.0.0.1:{port}"

    started = time.monotonic()
    up = make("up", env, timeout=240)
    output = up.stdout + up.stderr
    assert up.returncode == 0, output
    # The Makefile honoured our AIRFLOW_HOME: the log and the process-group file are in it. Airflow's database is
    # PostgreSQL, on the catalog's server: no SQLite file.
    assert (home / "airflow-standalone.log").is_file() and not (home / "airflow.db").exists(), output
    assert "Airflow's metadata database: postgresql://airflow@127.0.0.1:" in output, output
    pgid = int((home / "airflow.pgid").read_text())
    assert group_alive(pgid) and pgid != os.getpgid(0)
    assert (
        not (REPO / "airflow_home" / "airflow.pgid").exists()
        or int((REPO / "airflow_home" / "airflow.pgid").read_text()) != pgid
    )

    with httpx.Client(base_url=base, timeout=60) as http:
        assert http.get("/api/v2/monitor/health").status_code == 200

        # Login required: an anonymous client is refused.
        anonymous = http.get("/api/v2/dags")
        assert anonymous.status_code in (401, 403), anonymous.text

        # The generated admin password: in the file, and printed by `make up` next to the URL.
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        assert "admin" in passwords and passwords["admin"], passwords
        assert f"http://localhost:{port}" in output, output
        assert f"user admin  password {passwords['admin']}" in output, output

        bad = http.post("/auth/token", json={"username": "admin", "password": passwords["admin"] + "x"})
        assert bad.status_code == 401, bad.text
        token = http.post("/auth/token", json={"username": "admin", "password": passwords["admin"]})
        assert token.status_code in (200, 201), token.text
        http.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        check_report_pages(http, lake, token.json()["access_token"])

        def activity_dag():
            resp = http.get("/api/v2/dags", params={"dag_id_pattern": "activity"})
            assert resp.status_code == 200, resp.text
            return next((d for d in resp.json()["dags"] if d["dag_id"] == "activity"), None)

        dag = wait_for(activity_dag, timeout=120, interval=2)
        assert dag, f"activity not listed; log tail:\n{(home / 'airflow-standalone.log').read_text()[-3000:]}"
        errors = http.get("/api/v2/importErrors")
        assert errors.status_code == 200, errors.text
        assert errors.json()["total_entries"] == 0, errors.json()

        # Unpaused at creation: the scheduler starts the latest interval on its own.
        assert dag["is_paused"] is False, dag

        def a_run():
            resp = http.get("/api/v2/dags/activity/dagRuns")
            assert resp.status_code == 200, resp.text
            return resp.json()["dag_runs"]

        runs = wait_for(a_run, timeout=60, interval=2)
        assert runs, "no DAG run of activity was created"
        assert runs[0]["run_type"] == "scheduled", runs
        listed = len(a_run())  # the API first: the scheduler may add a run before psql reads, never remove one
        assert runs_in_postgres(stack, "activity") >= listed
        # The `airflow` command in a user's own shell (the venv's on PATH) reaches the same database by docs/airflow.md.
        assert AIRFLOW_CLI_RECIPE in (REPO / "docs" / "airflow.md").read_text()
        in_shell = subprocess.run(
            ["bash", "-c", f"{AIRFLOW_CLI_RECIPE} && airflow dags list-runs activity -o json"],
            cwd=REPO,
            env={**env, "PATH": f"{REPO / '.venv' / 'bin'}:{env['PATH']}"},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert in_shell.returncode == 0, in_shell.stderr[-3000:]
        assert len(json.loads(in_shell.stdout)) >= listed, in_shell.stdout
    # Stopping the catalog's server under a running Airflow is refused: `make down` stops Airflow first.
    refused = subprocess.run(
        [sys.executable, "-m", "millpond.cli", "catalog", "stop"], env=env, capture_output=True, text=True
    )
    assert refused.returncode == 1 and "Airflow has its metadata database open" in refused.stderr, refused.stderr
    assert home_processes(home)
    print(f"up + ready: {time.monotonic() - started:.0f} s")


def test_every_run_start_on_a_fresh_lake_succeeds(stack):
    from airflow_client.client.api.dag_api import DAGApi
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.backfill_post_body import BackfillPostBody
    from airflow_client.client.models.dag_patch_body import DAGPatchBody
    from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody
    from deltalake import DeltaTable, write_deltalake

    home, lake, port = stack["home"], stack["lake"], stack["port"]
    started = time.monotonic()
    api = client(f"http://127.0.0.1:{port}", home)
    dags_api, runs_api = DAGApi(api), DagRunApi(api)

    def all_dags():
        listed = {d.dag_id: d for d in dags_api.get_dags().dags}
        return listed if {"activity", "clicks", "device_status"} <= set(listed) else None

    dags = wait_for(all_dags, timeout=120, interval=2)
    assert dags, f"DAGs not listed; log tail:\n{(home / 'airflow-standalone.log').read_text()[-3000:]}"
    # The Kafka example has no broker address here: paused at creation, and its description says why.
    assert dags["device_status"].is_paused is True
    assert "MILLPOND_KAFKA_BOOTSTRAP" in (dags["device_status"].description or ""), dags["device_status"]
    unpaused = sorted(d for d, dag in dags.items() if not dag.is_paused)
    assert unpaused == ["activity", "activity__reprocess", "clicks", "customers", "millpond_freshness"], unpaused

    # Every unpaused DAG's first (scheduled) run is green on a lake where nothing has landed.
    for dag_id in unpaused:
        first = wait_for(lambda d=dag_id: runs_api.get_dag_runs(d).dag_runs, timeout=120, interval=2)
        assert first, f"no run of {dag_id} was created"
        run = finished(api, dag_id, first[0].dag_run_id, timeout=300)
        assert state_of(run) == "success", (dag_id, task_states(api, dag_id, run.dag_run_id))
        if dag_id == "millpond_freshness":
            continue  # it writes no run summary: checked below
        summary = run_summary.load(*run_summary.dag_run_key(dag_id, run.dag_run_id), root=lake)
        assert summary and all(t["outcome"] == "succeeded" and t["rows_written"] == 0 for t in summary["tables"])
        assert any("nothing has landed in landing/" in (t.get("nothing_yet") or "") for t in summary["tables"])
    assert not (lake / "bronze").exists(), "a run on a fresh lake created a table"
    assert not (lake / "_checkpoints").exists(), "a run on a fresh lake started a query"
    print(f"first runs green: {time.monotonic() - started:.0f} s")

    # The sentinel's first run found no data in activity's gold tables, nor in device_status's silver.device_status,
    # whose DAG is paused (since its creation, asserted above): one alert each. With activity's DAG paused too, a
    # check finds all three still stale and sends nothing more.
    gold = {"gold.device_counts", "gold.activity_hourly"}
    paused_table = "silver.device_status"
    assert sent(stack["alerts"]) == {(t, "stale") for t in gold | {paused_table}}
    dags_api.patch_dag("activity", DAGPatchBody(is_paused=True))
    statuses = check_freshness(api)
    assert {(s["table"], s["status"]) for s in statuses} == {(t, "stale") for t in gold | {paused_table}}
    assert len(alert_lines(stack["alerts"])) == 3
    dags_api.patch_dag("activity", DAGPatchBody(is_paused=False))

    # The REST API's default: no logical date. One file landed first, so the run has something to ingest.
    activity_files(lake / "landing" / "activity", 1, 200, seed=7)
    no_date = runs_api.trigger_dag_run("activity", TriggerDAGRunPostBody(logical_date=None))
    assert no_date.logical_date is None
    run = finished(api, "activity", no_date.dag_run_id, timeout=600)
    assert state_of(run) == "success", task_states(api, "activity", no_date.dag_run_id)
    summary = run_summary.load("activity", no_date.dag_run_id, root=lake)
    assert summary["data_interval"] == "none", summary
    # Ingested exactly once, by this run or, past an hour boundary, by a scheduled run that started first.
    assert table_state(lake / "bronze" / "activity").rows == 200, summary["tables"][0]
    # `make up` configures OpenLineage for Airflow and the tasks alike: the tables' events are children of the tasks
    # and DAG runs the provider sent events for, all in one file of the Airflow home.
    activity = load_pipeline("activity")
    lineage = events_in(home / "openlineage.jsonl")
    assert set(table_events(lineage, activity)) == set(activity.tables)
    assert_children_of_airflow_tasks(lineage, activity)

    # The gold tables were written by that run; silver.device_status, its DAG still paused, by hand (a repair: the
    # sentinel reads the table, whoever writes it). The next check sends one "recovered" each, and the status table
    # holds both episodes' edges.
    write_deltalake(str(lake / "silver" / "device_status"), device_status_row(), mode="append")
    assert dags_api.get_dag("device_status").is_paused is True
    recovered = gold | {paused_table}
    assert {(s["table"], s["status"]) for s in check_freshness(api)} == {(t, "fresh") for t in recovered}
    lines = alert_lines(stack["alerts"])
    assert sorted((line["table"], line["alert"]) for line in lines[3:]) == sorted((t, "recovered") for t in recovered)
    changes = DeltaTable(str(lake / "_system" / "freshness")).to_pyarrow_table().to_pylist()
    assert {(r["table"], r["previous"], r["status"]) for r in changes} == {(t, None, "stale") for t in recovered} | {
        (t, "stale", "fresh") for t in recovered
    }
    assert len(changes) == 6

    # With a logical date: the run has the interval the timetable gives it.
    logical = datetime(2026, 11, 2, 5, tzinfo=UTC)
    dated = runs_api.trigger_dag_run("activity", TriggerDAGRunPostBody(logical_date=logical))
    run = finished(api, "activity", dated.dag_run_id, timeout=300)
    assert state_of(run) == "success", task_states(api, "activity", dated.dag_run_id)
    interval = run_summary.load("activity", dated.dag_run_id, root=lake)["data_interval"]
    assert interval == {"start": run.data_interval_start.isoformat(), "end": run.data_interval_end.isoformat()}

    # A backfill of two intervals: two runs, one at a time, both green (nothing new: no Spark application).
    begin = datetime(2026, 11, 3, 0, tzinfo=UTC)
    create_backfill(
        api, BackfillPostBody(dag_id="activity", from_date=begin, to_date=begin + timedelta(hours=1), dag_run_conf={})
    )

    def backfill_runs():
        runs = [r for r in runs_api.get_dag_runs("activity").dag_runs if str(r.run_type.value) == "backfill"]
        return runs if len(runs) == 2 and all(state_of(r) in DONE for r in runs) else None

    runs = wait_for(backfill_runs, timeout=300, interval=3)
    assert runs, [(r.dag_run_id, state_of(r)) for r in runs_api.get_dag_runs("activity").dag_runs]
    assert {state_of(r) for r in runs} == {"success"}, [(r.dag_run_id, state_of(r)) for r in runs]
    assert sorted(r.logical_date for r in runs) == [begin, begin + timedelta(hours=1)]
    print(f"all runs green: {time.monotonic() - started:.0f} s")


def test_make_down_stops_a_running_task_and_leaves_nothing(stack):
    """A task actually runs when `make down` comes (a LocalExecutor worker is what ignores SIGTERM, and the task's
    run holds the pipeline lock), so `make down` has work to do."""
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody

    env, home, lake, port = stack["env"], stack["home"], stack["lake"], stack["port"]
    pgid = int((home / "airflow.pgid").read_text())
    api = client(f"http://127.0.0.1:{port}", home)
    activity_files(lake / "landing" / "activity", 2, 300, seed=9, start_index=1)
    run = DagRunApi(api).trigger_dag_run("activity", TriggerDAGRunPostBody(logical_date=None))
    states = wait_for(
        lambda: (s := task_states(api, "activity", run.dag_run_id)).get("ingest") in ("running", "success") and s,
        timeout=120,
        interval=1,
    )
    log_tail = (home / "airflow-standalone.log").read_text(errors="replace")[-4000:]
    assert states, f"the triggered run's ingest task never started\n{log_tail}"
    print(f"task states at make down: {states}")
    stack["runs_before_down"] = DagRunApi(api).get_dag_runs("activity").total_entries

    t0 = time.monotonic()
    down = make("down", env, timeout=90)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"nothing listens on :{port}" in down.stdout, down.stdout
    print(f"make down: {time.monotonic() - t0:.0f} s")

    assert not group_alive(pgid)
    assert not [p for p in stack["ports"] if accepts(p)]
    left = home_processes(home)
    assert not left, describe(left)
    assert not spark_processes(lake), describe(spark_processes(lake))
    assert not (home / "airflow.pgid").exists()
    data = str(stack["catalog"] / "postgres")  # the catalog's server, which Airflow's database lived in
    servers = [p for p in psutil.process_iter(["cmdline"]) if data in " ".join(p.info["cmdline"] or [])]
    assert not servers, describe(servers)

    # A second `make down` is harmless.
    again = make("down", env, timeout=30)
    assert again.returncode == 0 and "not running" in again.stdout, again.stdout + again.stderr


def test_make_up_on_a_moved_lake_then_backfills_reprocess_their_interval(stack, spark, monkeypatch, tmp_path):
    """The lake moved (same Airflow home and database): the assets are the tables, so every task still succeeds
    there; then backfills and manual runs that reprocess an interval, on that lake."""
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody

    home, port = stack["home"], stack["port"]
    lake = stack["lake"].parent / "moved-lake"
    env = {**stack["env"], "MILLPOND_LAKE": str(lake)}
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))  # this process reads the tables back
    landing = lake / "landing" / "activity"
    for hour in (0, 1, 2, 25, 26):  # the day, and the next day's early hours: silver's watermark passes the day
        land_hour(landing, hour, seed=hour)
    up = make("up", env, timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr
    api = client(f"http://127.0.0.1:{port}", home)
    runs_api = DagRunApi(api)
    # Airflow's database outlived `make down` with its server: the earlier tests' runs are listed (the scheduler may
    # add one between the two reads, never remove one).
    earlier = runs_api.get_dag_runs("activity").total_entries
    assert earlier >= stack["runs_before_down"] >= 6 and runs_in_postgres(stack, "activity") >= earlier

    first = runs_api.trigger_dag_run("activity", TriggerDAGRunPostBody(logical_date=None))
    assert state_of(finished(api, "activity", first.dag_run_id, timeout=600)) == "success"
    assert (lake / "gold" / "device_counts" / "_delta_log").is_dir()
    assert_matches_reference(spark, activity_reference(landing))

    # Hour 1 corrected under the same names; a backfill of it with default settings reprocesses it.
    land_hour(landing, 1, seed=101)
    before = summaries(lake)
    run = backfill(api, "activity", DAY.replace(hour=1), conf={})
    assert_matches_reference(spark, activity_reference(landing))
    hour_1 = ("2026-11-01T01:00:00+00:00", "2026-11-01T02:00:00+00:00")
    replaced = reprocessed(lake, "activity", run.dag_run_id, since=before)
    assert {t: v[:2] for t, v in replaced.items()} == {t: hour_1 for t in replaced}
    assert replaced["bronze.activity"][2] > 0 and replaced["silver.activity"][2] > 0

    # A later round: ingested exactly once by a plain run. Beside it the clicks pipeline's first run writes (the
    # tables it makes are named by the run itself), while the catalog is read again and again until both end: by
    # `millpond sql` on the engine and by `millpond sql` in a JVM of its own (the first lake's, where no engine runs).
    ran_before = summaries(lake)  # a run whose ingest had recorded its summary before hour 27 landed read none of it
    land_hour(landing, 27, seed=27)
    clicks_files(lake / "landing" / "impressions", lake / "landing" / "clicks", files=2, rows=300, seed=4)
    campaigns_file(lake / "landing" / "campaigns")
    before = table_state(lake / "silver" / "activity").rows
    later = runs_api.trigger_dag_run("activity", TriggerDAGRunPostBody(logical_date=None))
    ads = runs_api.trigger_dag_run("clicks", TriggerDAGRunPostBody(logical_date=None))
    runs = (("activity", later.dag_run_id), ("clicks", ads.dag_run_id))
    reads = read_while_running(
        {"engine": env, "own JVM": {**env, "MILLPOND_LAKE": str(stack["lake"])}},
        lambda: all(state_of(runs_api.get_dag_run(dag_id, run_id)) in DONE for dag_id, run_id in runs),
        tmp_path,
    )
    assert state_of(finished(api, "activity", later.dag_run_id, timeout=600)) == "success"
    assert state_of(finished(api, "clicks", ads.dag_run_id, timeout=600)) == "success"
    # Hour 27 is read once: by this run, or by a scheduled run (the hourly DAG's, or activity__reprocess's daily one,
    # which only drains what is new) that started first: the top of the hour can fall here.
    assert wait_for(lambda: bronze_rows_in(lake, since=ran_before) == FILES_PER_HOUR * 20, timeout=180, interval=3), (
        bronze_rows_in(lake, since=ran_before)
    )
    assert_matches_reference(spark, activity_reference(landing))
    after = table_state(lake / "silver" / "activity").rows
    assert after > before
    print(f"silver.activity by name while two pipelines wrote: {before} before, {after} after, read {reads}")
    for reader, counts in reads.items():  # each read a committed version, in order: never a partial or a step back
        assert counts and counts == sorted(counts) and before <= counts[0] and counts[-1] <= after, (reader, counts)
    by_name = sql_rows(
        "SELECT (SELECT count(*) FROM silver.activity) AS activity, "
        "(SELECT count(*) FROM silver.impression_clicks) AS clicks, (SELECT count(*) FROM gold.ad_clicks) AS ads",
        env,
    )
    assert by_name == [
        {
            "activity": after,
            "clicks": table_state(lake / "silver" / "impression_clicks").rows,
            "ads": table_state(lake / "gold" / "ad_clicks").rows,
        }
    ]

    # A daily backfill of the hourly pipeline: one run rebuilds the whole day.
    land_hour(landing, 2, seed=102)
    before = summaries(lake)
    run = backfill(api, "activity__reprocess", DAY, conf={})
    assert_matches_reference(spark, activity_reference(landing))
    day = ("2026-11-01T00:00:00+00:00", "2026-11-02T00:00:00+00:00")
    assert {t: v[:2] for t, v in reprocessed(lake, "activity__reprocess", run.dag_run_id, since=before).items()} == {
        t: day for t in replaced
    }

    # A manual run with a logical date and {"reprocess": true} reprocesses its interval too: the hour that ends at
    # its logical date (the timetable's manual interval).
    land_hour(landing, 2, seed=103)
    body = TriggerDAGRunPostBody(logical_date=DAY.replace(hour=3), conf={"reprocess": True})
    before = summaries(lake)
    manual = runs_api.trigger_dag_run("activity", body)
    run = finished(api, "activity", manual.dag_run_id, timeout=600)
    assert state_of(run) == "success", task_states(api, "activity", manual.dag_run_id)
    assert_matches_reference(spark, activity_reference(landing))
    interval = (run.data_interval_start.isoformat(), run.data_interval_end.isoformat())
    assert {v[:2] for v in reprocessed(lake, "activity", manual.dag_run_id, since=before).values()} == {interval}

    # {"reprocess": false}: the backfill only drains what is new (nothing here, so no Spark application).
    run = backfill(api, "activity", DAY.replace(hour=2), conf={"reprocess": False})
    assert all(v == (None, None, None) for v in reprocessed(lake, "activity", run.dag_run_id).values())
    down = make("down", env, timeout=90)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not spark_processes(lake), describe(spark_processes(lake))


def check_report_pages(http: httpx.Client, lake: Path, token: str) -> None:
    """The millpond plugin on the real API server: listed, its report pages behind the same login as the API."""
    page = reports.docs_dir(lake) / "validations" / "activity" / "silver" / "activity" / "run-1" / "report.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html><body>gate report, batch 1</body></html>")
    reports.write_index(lake)

    plugins = http.get("/api/v2/plugins")
    assert plugins.status_code == 200, plugins.text
    millpond = next((p for p in plugins.json()["plugins"] if p["name"] == "millpond"), None)
    assert millpond, plugins.json()
    assert [a["url_prefix"] for a in millpond["fastapi_apps"]] == ["/millpond/reports"], millpond
    assert {v["destination"] for v in millpond["external_views"]} == {"dag_run", "nav"}, millpond
    assert http.get("/api/v2/plugins/importErrors").json()["total_entries"] == 0

    url = "/millpond/reports/datadocs/validations/activity/silver/activity/run-1/report.html"
    with httpx.Client(base_url=http.base_url, timeout=10) as anonymous:
        assert anonymous.get(url).status_code == 401
        assert anonymous.get("/millpond/reports/index.html").status_code == 401
        # The browser's way after login: the JWT in the `_token` cookie.
        anonymous.cookies.set("_token", token)
        assert anonymous.get(url).text == page.read_text()
    assert "millpond data-quality gate" in http.get("/millpond/reports/index.html").text
    (lake / "outside.html").write_text("not a report")
    assert http.get("/millpond/reports/%2E%2E/outside.html").status_code == 404
    # The DAG-run tab: a run without a gate report yet lands on the index page.
    run = http.get("/millpond/reports/runs/activity/manual__none", follow_redirects=False)
    assert run.status_code == 307 and run.headers["location"] == "/millpond/reports/index.html", run.headers


def client(base: str, home):
    """The official client, logged in with the admin password `make up` generated (SimpleAuthManager's JWT)."""
    from airflow_client import client as airflow_client

    password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
    token = httpx.post(f"{base}/auth/token", json={"username": "admin", "password": password}, timeout=60)
    assert token.status_code in (200, 201), token.text
    config = airflow_client.Configuration(host=base, access_token=token.json()["access_token"])
    return airflow_client.ApiClient(config)


def finished(api, dag_id: str, run_id: str, timeout: float):
    from airflow_client.client.api.dag_run_api import DagRunApi

    runs = DagRunApi(api)

    def state():
        run = runs.get_dag_run(dag_id, run_id)
        return run if str(run.state.value if hasattr(run.state, "value") else run.state) in DONE else None

    run = wait_for(state, timeout=timeout, interval=3)
    assert run, f"{dag_id} run {run_id} did not finish in {timeout:.0f} s"
    return run


def task_states(api, dag_id: str, run_id: str) -> dict[str, str]:
    from airflow_client.client.api.task_instance_api import TaskInstanceApi

    tis = TaskInstanceApi(api).get_task_instances(dag_id, run_id).task_instances
    return {ti.task_id: str(ti.state.value if hasattr(ti.state, "value") else ti.state) for ti in tis}


def create_backfill(api, body) -> None:
    """POST /backfills as a client of Airflow on SQLite (what `make up` runs) must: a request that meets the
    scheduler's write gets 503 "database is locked", and Airflow removes the half-made backfill so it can be sent
    again (apache/airflow#67900; a CI run of this test met it)."""
    from airflow_client.client.api.backfill_api import BackfillApi
    from airflow_client.client.exceptions import ServiceException

    for attempt in range(10):
        try:
            BackfillApi(api).create_backfill(body)
            return
        except ServiceException as refused:
            if refused.status != 503 or attempt == 9:
                raise
            time.sleep(3)


def check_freshness(api) -> list[dict]:
    """One manual run of the freshness sentinel, waited for; its task's XCom: every table's status."""
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.api.x_com_api import XComApi
    from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody

    run = DagRunApi(api).trigger_dag_run("millpond_freshness", TriggerDAGRunPostBody(logical_date=None))
    done = finished(api, "millpond_freshness", run.dag_run_id, timeout=120)
    assert state_of(done) == "success", task_states(api, "millpond_freshness", run.dag_run_id)
    entry = XComApi(api).get_xcom_entry(
        "millpond_freshness", "check_freshness", run.dag_run_id, "return_value", deserialize=True, stringify=False
    )
    value = entry.actual_instance.value  # the response is a oneOf wrapper
    return value if isinstance(value, list) else json.loads(value)


def alert_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def sent(path: Path) -> set[tuple[str, str]]:
    return {(line["table"], line["alert"]) for line in alert_lines(path)}


def state_of(run) -> str:
    return str(run.state.value if hasattr(run.state, "value") else run.state)


def read_while_running(envs: dict[str, dict[str, str]], done, folder: Path) -> dict[str, list[int]]:
    """silver.activity's count by name, read by each reader (`millpond sql` under its environment) over and over,
    all at once, until `done()`; each reader's counts in the order read. A failed read fails the test; the one
    called "engine" must have run on the engine, the others in a JVM of their own. Output goes to files: a pipe
    nobody drains would stall a chatty JVM."""
    query = "SELECT count(*) AS n FROM silver.activity"
    reads: dict[str, list[int]] = {reader: [] for reader in envs}
    running: dict[str, subprocess.Popen] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        finishing = done()
        for reader, env in envs.items():
            if reader in running and running[reader].poll() is None:
                continue
            out, err = folder / f"{reader}.out", folder / f"{reader}.err"
            if reader in running:
                assert running.pop(reader).returncode == 0, (reader, err.read_text()[-3000:])
                assert ("millpond: on the engine (pid" in err.read_text()) == (reader == "engine"), err.read_text()
                reads[reader].append(json.loads(out.read_text())[0]["n"])
            if not finishing:
                with out.open("w") as stdout, err.open("w") as stderr:
                    running[reader] = subprocess.Popen(
                        [sys.executable, "-m", "millpond.cli", "sql", query, "--format", "json"],
                        cwd=REPO,
                        env=env,
                        stdout=stdout,
                        stderr=stderr,
                    )
        if finishing and not running:
            return reads
        time.sleep(0.5)
    raise AssertionError(f"the runs did not end in 600 s; reads so far: {reads}")


def land_hour(landing, hour: int, seed: int) -> None:
    activity_files(
        landing, FILES_PER_HOUR, 20, duplicates=0.05, malformed=0.03, seed=seed, start_index=hour * FILES_PER_HOUR
    )


def backfill(api, dag_id: str, logical: datetime, conf: dict) -> object:
    """One backfill run for the interval starting at `logical`, waited for."""
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.backfill_post_body import BackfillPostBody

    create_backfill(api, BackfillPostBody(dag_id=dag_id, from_date=logical, to_date=logical, dag_run_conf=conf))

    def run():
        runs = [r for r in DagRunApi(api).get_dag_runs(dag_id).dag_runs if str(r.run_type.value) == "backfill"]
        mine = [r for r in runs if r.logical_date == logical]
        return mine[0] if mine and state_of(mine[0]) in DONE else None

    done = wait_for(run, timeout=600, interval=3)
    assert done, f"the backfill of {dag_id} at {logical} did not finish"
    assert state_of(done) == "success", task_states(api, dag_id, done.dag_run_id)
    return done


def summaries(lake: Path) -> set[Path]:
    """The run summaries the activity pipeline has so far (before a run starts)."""
    return set((lake / "_system" / "runs" / "activity").glob("*.json"))


def bronze_rows_in(lake: Path, since: set[Path]) -> int:
    """The rows bronze.activity read in the runs of the activity pipeline (its reprocess DAG's included, which share
    the folder) whose summary was first written after `since` was taken (a run's ingest writes it)."""
    tables = [t for path in summaries(lake) - since for t in json.loads(path.read_text())["tables"]]
    return sum(t["rows_in"] for t in tables if t["table"] == "bronze.activity")


def reprocessed(lake, dag_id: str, run_id: str, since: set[Path] | None = None) -> dict[str, tuple]:
    """Per table of the run: the interval its reprocess rebuilt and the rows it replaced ((None, None, None) if it
    rebuilt none). With `since` (the summaries before the run), a table the run left owed counts as rebuilt by a run
    that started meanwhile and finished it: an hourly scheduled run of the main DAG whose gold task comes between the
    backfill's ingest and gold tasks finishes the owed rebuild first (runner.unfinished_reprocess), as it must. That
    run's summary is written when it ends, which can be after this run's: it is waited for (up to 3 minutes)."""
    summary = run_summary.load(*run_summary.dag_run_key(dag_id, run_id), root=lake)
    assert summary and len(summary["tables"]) == 4, summary
    found = {t["table"]: (t["reprocess_start"], t["reprocess_end"], t["rows_replaced"]) for t in summary["tables"]}
    if since is None:
        return found

    def with_runs_since() -> dict[str, tuple] | None:
        for path in sorted(summaries(lake) - since):
            for t in json.loads(path.read_text())["tables"]:
                if found.get(t["table"], (None,))[0] is None and t.get("reprocess_start"):
                    found[t["table"]] = (t["reprocess_start"], t["reprocess_end"], t["rows_replaced"])
        return found if all(v[0] is not None for v in found.values()) else None

    return wait_for(with_runs_since, timeout=180, interval=3) or found
