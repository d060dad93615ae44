"""Run real `airflow dags test` processes against a throwaway AIRFLOW_HOME and lake, and watch their processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.support import REPO

BIN = Path(sys.executable).parent
LOCAL_SPARK = '{"conn_type": "spark", "host": "local[2]"}'


def airflow_env(home: Path, lake: Path, spark_conn: str = LOCAL_SPARK, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "MILLPOND_", "PYSPARK_GATEWAY", "OPENLINEAGE"))
    }
    env.update(
        {
            "PATH": f"{BIN}:{env.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW_CONN_SPARK_MILLPOND": spark_conn,
            "MILLPOND_LAKE": str(lake),
            "MILLPOND_RETRY_DELAY_SECONDS": "1",
            "TZ": "UTC",
        }
    )
    env.update(extra)
    return env


def stored_report_links(home: Path) -> dict[tuple[str, str], str]:
    """The "Data-quality report" links Airflow stored per (run id, task): the XCom `_link_ReportLink` the UI shows."""
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT run_id, task_id, value FROM xcom WHERE key = '_link_ReportLink'").fetchall()
    return {(run_id, task_id): json.loads(value) for run_id, task_id, value in rows}


_MIGRATED: list[Path] = []  # this process's (pytest-xdist worker's) migrated database, made once


def migrate(env: dict[str, str]) -> None:
    """A migrated metadata database in env's AIRFLOW_HOME: a copy of one `airflow db migrate` made once per test
    worker (a fresh SQLite file, nothing run in it yet), where a migration per Airflow home took seconds each."""
    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    if not _MIGRATED:
        template = Path(tempfile.mkdtemp(prefix="millpond-migrated-airflow-"))
        clean = {**env, "AIRFLOW_HOME": str(template)}
        subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=clean, check=True, capture_output=True, timeout=300)
        _MIGRATED.append(template / "airflow.db")
    shutil.copyfile(_MIGRATED[0], home / "airflow.db")


def start_dags_test(
    env: dict[str, str], logical_date: str, log: Path, conf: dict | None = None, dag_id: str = "activity"
) -> subprocess.Popen:
    """`airflow dags test` in its own process group (so a test can always stop all of it)."""
    cmd = [str(BIN / "airflow"), "dags", "test", dag_id, logical_date]
    if conf:
        cmd += ["--conf", json.dumps(conf)]
    handle = open(log, "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def dags_test(
    env: dict[str, str],
    logical_date: str,
    log: Path,
    conf: dict | None = None,
    timeout: float = 900,
    dag_id: str = "activity",
) -> tuple[int, str]:
    proc = start_dags_test(env, logical_date, log, conf, dag_id)
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        stop_group(proc)
    return rc, log.read_text(errors="replace")


def stop_group(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM the process group, then SIGKILL it: nothing a test started outlives it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if not group_alive(proc.pid):
            break


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


# What `make test-engine` leaves in a test's environment (its engine's URL, and pyspark's mark of a process holding a
# Connect session), which pyspark and Spark's launcher read as "talk to a Connect server": a process that must run
# other code or another master than the engine's leaves them out.
CONNECT_VARIABLES = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


def spark_processes(lake: Path) -> list[psutil.Process]:
    """Every JVM or Python driver working for this lake (found by the MILLPOND_LAKE in its environment): spark-submit's
    JVM and its runner.py, or on the engine the task's runner process (`python -m millpond.driver.runner`)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            ours = proc.environ().get("MILLPOND_LAKE") == str(lake)
            if ours and ("SparkSubmit" in cmdline or is_runner(cmdline)):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def is_runner(cmdline: str) -> bool:
    """A run's Python driver: runner.py under spark-submit, or the runner module an engine task starts."""
    return "runner.py" in cmdline or "millpond.driver.runner" in cmdline


def wait_for(predicate, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()
