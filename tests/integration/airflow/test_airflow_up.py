"""`make up` / `make down` against the real thing: what the README promises, checked over HTTP and in the process table.

`make up` starts `airflow standalone` in its own process group with login required and prints the URL and the
generated admin password; DAGs are unpaused at creation, so the activity pipeline's latest interval runs.
`make down` stops that whole group and nothing is left: no process of this AIRFLOW_HOME, nothing on the port.

Isolation: a throwaway AIRFLOW_HOME and lake, and ports picked free on 127.0.0.1 (the API port plus the two log-server
ports that scheduler and triggerer would otherwise open on 8793/8794). `-o setup`: the venv and jars are not rebuilt
under a running test session (pip would reinstall millpond in the very venv pytest runs from).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from millpond.runs import reports
from tests.support import REPO
from tests.support.airflow_run import group_alive, spark_processes, wait_for

pytestmark = pytest.mark.integration

MAKE = ["make", "--no-print-directory", "-o", "setup"]


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


def make(target: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([*MAKE, target], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def stack(tmp_path: Path):
    home, lake = tmp_path / "airflow_home", tmp_path / "lake"
    port, worker_logs, trigger_logs = free_ports(3)
    # Only what a user would have: no AIRFLOW_*/MILLPOND_* of this session, no make state of an outer make.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "MILLPOND_", "PYSPARK", "SPARK_", "MAKE", "MFLAGS"))
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "MILLPOND_LAKE": str(lake),
            "AIRFLOW_PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_logs),
            "AIRFLOW__CORE__PARALLELISM": "2",
        }
    )
    assert not accepts(port)
    info = {"env": env, "home": home, "lake": lake, "port": port, "ports": (port, worker_logs, trigger_logs)}
    try:
        yield info
    finally:
        # Always: make down (idempotent), then SIGKILL whatever of this home survived it, process group first.
        try:
            make("down", env, timeout=90)
        except subprocess.TimeoutExpired:
            pass
        pgid_file = home / "airflow.pgid"
        pgids = {int(pgid_file.read_text())} if pgid_file.exists() else set()
        for proc in home_processes(home) + spark_processes(lake):
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


def test_make_up_serves_the_dags_behind_a_login_and_make_down_leaves_nothing(stack):
    env, home, lake, port = stack["env"], stack["home"], stack["lake"], stack["port"]
    base = f"http://127.0.0.1:{port}"

    started = time.monotonic()
    up = make("up", env, timeout=240)
    output = up.stdout + up.stderr
    assert up.returncode == 0, output
    # The Makefile honoured our AIRFLOW_HOME: the database, the log and the process-group file are in it.
    assert (home / "airflow.db").is_file() and (home / "airflow-standalone.log").is_file(), output
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

        # Let a task actually start (a LocalExecutor worker is what ignores SIGTERM), so `make down` has work to do.
        seen: dict[str, str | None] = {}

        def a_running_task():
            resp = http.get(f"/api/v2/dags/activity/dagRuns/{runs[0]['dag_run_id']}/taskInstances")
            seen.update({ti["task_id"]: ti["state"] for ti in resp.json()["task_instances"]})
            return dict(seen) if {"running", "success"} & set(seen.values()) else None

        states = wait_for(a_running_task, timeout=60, interval=2)
        log_tail = (home / "airflow-standalone.log").read_text(errors="replace")[-4000:]
        assert states, f"no task of the scheduled run started: {seen}\n{log_tail}"
    assert home_processes(home)
    print(f"up + ready + a task running: {time.monotonic() - started:.0f} s; task states {states}")

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

    # A second `make down` is harmless.
    again = make("down", env, timeout=30)
    assert again.returncode == 0 and "not running" in again.stdout, again.stdout + again.stderr


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
