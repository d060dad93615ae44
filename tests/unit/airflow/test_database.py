"""`make up` runs four Airflow processes on one SQLite file: a write that finds the lock taken waits for it."""

import os
import sqlite3
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.unit

WRITE = """
import time
from sqlalchemy import text
from airflow import settings
print("ready", flush=True)
started = time.monotonic()
try:
    with settings.Session() as session:
        session.execute(text("CREATE TABLE written_after_the_lock (x INTEGER)"))
        session.commit()
    print(f"written after {time.monotonic() - started:.1f} s")
except Exception as exc:
    print(f"failed after {time.monotonic() - started:.1f} s: {exc}")
    raise SystemExit(1)
"""

HOLD_SECONDS = 7.0  # longer than sqlite3's 5 s default, shorter than millpond.airflow.database.SQLITE_WAIT_SECONDS


def airflow_env(tmp_path, db, connect_args: bool) -> dict[str, str]:
    """The settings scripts/airflow-up.sh exports for a SQLite database, or Airflow's defaults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    if connect_args:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = "millpond.airflow.database.CONNECT_ARGS"
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"] = "millpond.airflow.database.ASYNC_CONNECT_ARGS"
    return env


def test_a_write_waits_for_the_lock_with_make_ups_settings_and_fails_after_5_s_without(tmp_path):
    db = tmp_path / "airflow.db"
    script = tmp_path / "write.py"
    script.write_text(WRITE)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE taken (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    children = {
        with_args: subprocess.Popen(
            [sys.executable, str(script)],
            env=airflow_env(tmp_path, db, with_args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for with_args in (True, False)
    }
    for child in children.values():  # both have imported Airflow and go on to write
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
    time.sleep(HOLD_SECONDS)
    holder.execute("COMMIT")
    holder.close()
    out = {with_args: child.communicate(timeout=120)[0] for with_args, child in children.items()}
    assert children[True].returncode == 0, out[True]
    assert "written after" in out[True], out[True]
    assert children[False].returncode == 1, out[False]
    assert "database is locked" in out[False], out[False]


def test_another_database_gets_no_sqlite_arguments(tmp_path):
    """make up's settings name these arguments whatever the database; on PostgreSQL (set here in airflow.cfg, not
    the environment) they are empty, since psycopg2 would refuse SQLite's `timeout`."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "airflow.cfg").write_text("[database]\nsql_alchemy_conn = postgresql+psycopg2://u:p@127.0.0.1:1/airflow\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {"AIRFLOW_HOME": str(home)}
    env["_AIRFLOW_SKIP_DB_TESTS"] = "true"  # Airflow's own switch: no engine (this venv has no PostgreSQL driver)
    shown = "from millpond.airflow import database as d; print(d.CONNECT_ARGS, d.ASYNC_CONNECT_ARGS)"
    out = subprocess.run([sys.executable, "-c", shown], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["{}", "{}"]
