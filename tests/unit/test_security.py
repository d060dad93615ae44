"""No secret in the repository or on a `spark-submit` command line: secrets live in connections and environment.

(Anonymous requests to the UI/API are refused: tests/integration/airflow/test_make_up.py against a real `make up`.
Spec paths cannot leave the lake root: tests/unit/spec/test_loader.py.)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess

import pytest

from tests.support import REPO

pytestmark = pytest.mark.unit

SECRET_PATTERNS = {
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "AWS access key": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "password literal": re.compile(
        r"(?i)\b\w*(password|passwd|secret|token)\w*\s*[:=]\s*['\"]?(?!change-me)[A-Za-z0-9+/_\-]{12,}"
    ),
    "URL with credentials": re.compile(r"\b[a-z]+://[^/\s:@'\"]+:[^/\s@'\"$]{6,}@"),
}


def tracked_files() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()


def test_no_secret_is_committed():
    found = []
    for name in tracked_files():
        path = REPO / name
        if not path.is_file() or path.suffix in {".png", ".jpg", ".parquet"}:
            continue
        text = path.read_text(errors="replace")
        found += [f"{name}: {kind}: {m.group(0)[:40]}" for kind, p in SECRET_PATTERNS.items() for m in p.finditer(text)]
    assert found == []


def test_the_secret_file_is_ignored_and_only_its_example_is_committed():
    files = set(tracked_files())
    assert ".env.example" in files
    assert not {".env", "airflow_home/airflow.db", "airflow_home/simple_auth_manager_passwords.json.generated"} & files
    ignored = subprocess.run(
        ["git", "check-ignore", ".env", "airflow_home/x", "lake/x"], cwd=REPO, capture_output=True, text=True
    ).stdout.split()
    assert ignored == [".env", "airflow_home/x", "lake/x"]


def test_spark_submit_command_line_carries_no_secret(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from millpond.airflow import spark_app
    from millpond.driver import jars

    secret = secrets.token_urlsafe(16)  # made at run time: a literal here would be a committed "secret" itself
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_MILLPOND",
        json.dumps(
            {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077, "login": "spark", "password": secret}
        ),
    )
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secret)
    task = DagBag(dag_folder=str(REPO / "dags")).dags["activity"].get_task("ingest")
    task.jars = ",".join(jars.spark_jars())
    task.conf = {**spark_app.spark_conf("spark://127.0.0.1:7077"), **(task.conf or {})}
    task.env_vars = {**spark_app.job_env(), **(task.env_vars or {})}
    hook = task.build_hook()
    command = hook._build_spark_submit_command(task.application)
    assert "--master" in command and "spark://127.0.0.1:7077" in command
    assert not [arg for arg in command if secret in arg]
    assert not [value for value in task.env_vars.values() if secret in value]


def test_an_object_store_lakes_credentials_come_from_the_airflow_connection_into_the_environment_only(
    monkeypatch, tmp_path
):
    """A task on an s3a lake, through the operator's own submit(): the AWS connection's keys are in spark-submit's
    environment (inherited), never on its command line or in the task's env_vars (which the provider turns into
    --conf under yarn/k8s); the worker's own session token is set aside; the s3a jars go to the cluster's executors
    with --jars, the endpoint as a setting; the task's environment is restored afterwards."""
    from airflow.dag_processing.dagbag import DagBag

    from millpond.airflow import spark_app
    from millpond.airflow.hooks import MillpondSparkSubmitHook

    secret, key_id = secrets.token_urlsafe(16), secrets.token_hex(8)
    s3a_jars = tmp_path / "s3a-jars"
    s3a_jars.mkdir()
    for name in ("hadoop-aws-3.5.0.jar", "bundle-2.24.6.jar"):  # names only: the command is built, not run
        (s3a_jars / name).write_bytes(b"")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "the-workers-own-token")
    monkeypatch.setenv("MILLPOND_LAKE", "s3a://lakes/prod")
    monkeypatch.setenv("MILLPOND_S3A_JARS", str(s3a_jars))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_MILLPOND", '{"conn_type": "spark", "host": "spark://127.0.0.1:7077"}')
    extra = {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_MILLPOND",
        json.dumps({"conn_type": "aws", "login": key_id, "password": secret, "extra": extra}),
    )
    submitted: dict = {}

    def record(hook, application: str = "", **kwargs) -> None:  # what spark-submit would be started with
        submitted["command"] = hook._build_spark_submit_command(application)
        submitted["environment"] = {**os.environ, **(hook._env or {})}

    monkeypatch.setattr(MillpondSparkSubmitHook, "submit", record)
    task = DagBag(dag_folder=str(REPO / "dags")).dags["activity"].get_task("ingest")
    rendered = {
        "--run-id": "r1",
        "--trigger": "manual",
        "--data-interval-start": "none",
        "--data-interval-end": "none",
        "--full-refresh": "",
    }
    args = task.application_args
    task.application_args = [rendered.get(args[i - 1], arg) if "{{" in arg else arg for i, arg in enumerate(args)]
    with spark_app.lake_access():
        task.submit()
    command, environment = submitted["command"], submitted["environment"]
    assert not [arg for arg in command if secret in arg or key_id in arg]
    assert not [value for value in task.env_vars.values() if secret in value]
    assert environment["AWS_SECRET_ACCESS_KEY"] == secret and environment["AWS_ACCESS_KEY_ID"] == key_id
    assert environment["AWS_REGION"] == "eu-west-1" and "AWS_SESSION_TOKEN" not in environment
    assert environment["MILLPOND_LAKE"] == "s3a://lakes/prod"
    assert str(s3a_jars / "hadoop-aws-3.5.0.jar") in command[command.index("--jars") + 1]
    assert "spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:9000" in command
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ, "the task's environment is restored after its work"
    assert os.environ["AWS_SESSION_TOKEN"] == "the-workers-own-token"
