"""The same DAG on a real Spark standalone cluster: master and worker started here with `spark-class`, on 127.0.0.1.

Only the Spark connection changes (spark://...); the job ships our code (--py-files zip) and the Delta jars to
the executors. The tables must equal the plain-Python reference, exactly as the local-Spark run does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyspark
import pytest

from millpond.dev.sample_data import activity_files
from millpond.driver import driver_jit
from tests.support.airflow_run import (
    BIN,
    CONNECT_VARIABLES,
    airflow_env,
    dags_test,
    migrate,
    spark_processes,
    stop_group,
    wait_for,
)
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference

pytestmark = [pytest.mark.integration, pytest.mark.outside_ci]  # docs/testing.md: still outside CI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def master_state(webui: int) -> dict:
    """The master's status page; {} until it answers with JSON (its web UI answers an empty body while starting)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as response:
            return json.load(response)
    except (OSError, ValueError):
        return {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-cluster")
    port, webui = free_port(), free_port()
    # spark-class from the pip package finds its SPARK_HOME through the first python3 on PATH: make it ours.
    env = {  # without a Connect remote: Spark's launcher gives a JVM started beside one a Connect-only classpath
        **{k: v for k, v in os.environ.items() if k not in CONNECT_VARIABLES},
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(root),
        "SPARK_WORKER_DIR": str(root / "work"),
    }
    started = []
    try:
        started.append(
            subprocess.Popen(
                [
                    str(BIN / "spark-class"),
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(webui),
                ],
                env=env,
                stdout=open(root / "master.log", "w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        assert (
            wait_for(lambda: master_state(webui).get("status") == "ALIVE" or started[0].poll() is not None, timeout=120)
            and started[0].poll() is None
        ), (root / "master.log").read_text()[-2000:]
        started.append(
            subprocess.Popen(
                [
                    str(BIN / "spark-class"),
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "2",
                    "--memory",
                    "2g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(root / "work"),
                    f"spark://127.0.0.1:{port}",
                ],
                env=env,
                stdout=open(root / "worker.log", "w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        assert (
            wait_for(
                lambda: master_state(webui).get("aliveworkers", 0) >= 1 or started[1].poll() is not None, timeout=120
            )
            and started[1].poll() is None
        ), (root / "worker.log").read_text()[-2000:]
        yield f"spark://127.0.0.1:{port}", webui, root / "work"
    finally:
        for proc in reversed(started):
            stop_group(proc)


def test_the_dag_on_a_standalone_cluster_gives_the_reference_tables(cluster, tmp_path, spark, monkeypatch):
    master, webui, work = cluster
    lake = tmp_path / "lake"
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    activity_files(lake / "landing" / "activity", 2, 300, duplicates=0.05, malformed=0.01, seed=1)
    env = airflow_env(tmp_path / "airflow_home", lake, spark_conn=master)
    for name in CONNECT_VARIABLES:  # the cluster, not `make test-engine`'s engine, which would take precedence
        env.pop(name, None)
    migrate(env)
    rc, log = dags_test(env, "2026-11-02T05:00:00+00:00", tmp_path / "cluster.log")
    assert rc == 0, log[-3000:]
    assert f"Spark master {master}" in log
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))
    apps = [app for app in master_state(webui).get("completedapps", []) if app["name"].startswith("millpond:activity")]
    assert len(apps) == 2, apps  # ingest and gold ran as applications on the cluster
    assert all(app["state"] == "FINISHED" for app in apps)
    # Each executor's log opens with the command the worker started it with: methods of any size are compiled.
    launched = [log.read_text().split("\n=====", 1)[0] for app in apps for log in (work / app["id"]).glob("*/stderr")]
    assert len(launched) >= 2 and all(driver_jit.HUGE_METHODS_OPTIONS in command for command in launched), launched
    assert spark_processes(lake) == []
