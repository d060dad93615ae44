"""millpond as a user gets it: the wheel built, installed into a fresh venv outside the repository, and a project
`millpond init` made there run with `millpond run` and through `airflow dags test` - no checkout on any path.

What it proves that the repository's own tests cannot: the package's dependencies and data (templates, the Spark
functions jar) are declared, `millpond jars` fetches what `make jars` does, and nothing reaches back into the repo.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.airflow_run import CONNECT_VARIABLES

pytestmark = [pytest.mark.integration, pytest.mark.outside_ci]  # docs/testing.md: still outside CI
REPO = Path(__file__).resolve().parents[2]
PIPELINE = "sensors"


def outside_repo_env(venv: Path, **extra: str) -> dict[str, str]:
    """This process's environment as a fresh shell with only the new venv activated: no repo on any path."""
    env = {
        k: v
        for k, v in os.environ.items()
        # CONNECT_VARIABLES too: `make test-engine`'s engine runs the checkout's code, which the wheel's runs refuse
        if not k.startswith(
            ("AIRFLOW", "MILLPOND_", "PYSPARK", "PYTHON", "SPARK_HOME", "VIRTUAL_ENV", *CONNECT_VARIABLES)
        )
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).resolve().is_relative_to(REPO)]
    env.update(
        {
            "PATH": os.pathsep.join([str(venv / "bin"), *path]),
            "VIRTUAL_ENV": str(venv),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "TZ": "UTC",
        }
    )
    env.update(extra)
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"{time.monotonic() - started:6.1f} s  {' '.join(cmd[:4])}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{output[-6000:]}"
    return output


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv holding the wheel (and its airflow extra) at requirements.txt's pins."""
    work = tmp_path_factory.mktemp("installed")
    assert not work.resolve().is_relative_to(REPO)
    env = outside_repo_env(Path(sys.executable).parent.parent)
    run([str(REPO / "scripts" / "build-wheel.sh"), sys.executable, str(work / "dist")], cwd=REPO, env=env)
    (wheel,) = (work / "dist").glob("millpond-*.whl")
    run([sys.executable, "-m", "venv", str(work / "venv")], cwd=work, env=env)
    pip = [str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run([*pip, f"{wheel}[airflow]", "-c", str(REPO / "requirements.txt")], cwd=work, env=env)
    return work / "venv"


def table_rows(project: Path, venv: Path) -> dict[str, list[dict]]:
    """Each table's rows as delta-rs reads them (no Spark, no millpond), found through `millpond status`."""
    from deltalake import DeltaTable

    status = json.loads(run(["millpond", "status", PIPELINE, "--json"], cwd=project, env=outside_repo_env(venv)))
    tables = {}
    for entry in status:
        path = Path(entry["path"])
        assert path.is_relative_to(project / "lake"), path
        if (path / "_delta_log").is_dir():
            tables[f"{path.parent.name}.{path.name}"] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return tables


def landed_records(project: Path) -> list[dict]:
    return [
        json.loads(line)
        for file in sorted((project / "lake" / "landing" / PIPELINE).glob("*.json"))
        for line in file.read_text().splitlines()
    ]


def assert_tables_hold(project: Path, venv: Path) -> int:
    """bronze = every landed line, silver = them deduplicated, gold = silver counted per device."""
    landed = landed_records(project)
    per_device = collections.Counter(r["Device"] for r in landed)
    assert len({(r["Device"], r["Index"], r["Recorded_At"]) for r in landed}) == len(landed)  # nothing to dedup
    tables = table_rows(project, venv)
    assert len(tables[f"bronze.{PIPELINE}"]) == len(landed)
    assert sorted(r["Index"] for r in tables[f"silver.{PIPELINE}"]) == sorted(r["Index"] for r in landed)
    gold = {r["Device"]: r["recordings"] for r in tables[f"gold.{PIPELINE}_per_device"]}
    assert gold == dict(per_device)
    return len(landed)


def test_a_project_outside_the_repo_runs_on_the_installed_wheel(venv, tmp_path):
    env = outside_repo_env(venv, MILLPOND_RETRY_DELAY_SECONDS="1")
    python = str(venv / "bin" / "python")
    where = run([python, "-c", "import millpond; print(millpond.__file__)"], cwd=tmp_path, env=env).strip()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(REPO), where

    run(["millpond", "init", "project", "--pipeline", PIPELINE], cwd=tmp_path, env=env)
    project = tmp_path / "project"
    assert (project / "dags" / "millpond_pipelines.py").read_text() == (
        REPO / "dags" / "millpond_pipelines.py"
    ).read_text()
    run(["millpond", "jars"], cwd=project, env=env)
    fetched = sorted(p.name for p in (project / ".cache" / "jars").glob("*.jar"))
    made = sorted(p.name for p in (REPO / ".cache" / "jars").glob("*.jar") if p.name != "millpond-spark.jar")
    assert fetched == made  # the same files `make jars` puts in a checkout
    assert (project / ".cache" / "report-assets" / "META-INF" / "resources" / "webjars" / "jquery").is_dir()

    run(["millpond", "generate", PIPELINE, "--files", "2", "--rows", "300"], cwd=project, env=env)
    run(["millpond", "run", PIPELINE], cwd=project, env=env)
    assert assert_tables_hold(project, venv) == 600

    # One more round, drained by an Airflow DAG run: spark-submit, the gate task, the summary, all from the wheel.
    run(["millpond", "generate", PIPELINE, "--files", "1", "--rows", "300"], cwd=project, env=env)
    airflow_env = {
        **env,
        "AIRFLOW_HOME": str(tmp_path / "airflow_home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(project / "dags"),
        "AIRFLOW_CONN_SPARK_MILLPOND": '{"conn_type": "spark", "host": "local[2]"}',
    }
    run(["airflow", "db", "migrate"], cwd=project, env=airflow_env, timeout=300)
    run(["airflow", "dags", "test", PIPELINE, "2026-11-25T00:00:00+00:00"], cwd=project, env=airflow_env)
    assert assert_tables_hold(project, venv) == 900
    runs = sorted((project / "lake" / "_system" / "runs" / PIPELINE).glob("*.json"))
    assert runs, "the DAG's run_summary task wrote no run summary"
