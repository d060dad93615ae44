"""The millpond Spark application as a task submits it: the runner's file, the Spark connection, the environment
and conf the job gets, how an object-store lake is reached, and what the runner's exit codes mean.

Shared by the operator (which resolves them when its task runs) and the hook (which reads the exit codes); light, so
the operator module can import it while the DAG file is parsed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from millpond import process_env, settings
from millpond.driver import connect_server, s3a, speedups
from millpond.driver.spark_conf import base_conf
from millpond.lake import paths

SPARK_CONN_ID = "spark_millpond"
ENGINE_CONN_ID = "spark_connect_millpond"  # the engine the tasks run on (docs/engine.md#airflow)
AWS_CONN_ID = "aws_millpond"  # an object-store lake's credentials and endpoint (docs/object-storage.md#airflow)
EXIT_CODES = {
    1: "a table failed",
    2: "invalid spec or arguments",
    3: "pipeline busy (another writer holds the lock)",
    4: "a quality gate failed",
    5: "the engine (connection spark_connect_millpond, or SPARK_REMOTE) runs other code than this run, or does not "
    "answer: restart it, then redefine the connection (`make down && make up` does both)",
}
STOPPED = "the Spark application was stopped (task killed, timed out or marked failed)"


def module_file(name: str) -> Path:
    """A module's file, found without importing it: the runner imports pyspark, which DAG parsing must not."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"{name} is not installed")
    return Path(spec.origin)


RUNNER = module_file("millpond.driver.runner")  # spark-submit's application


def spark_master(conn_id: str = SPARK_CONN_ID) -> str:
    """The connection's master, or a clear error: the provider would otherwise fall back to `--master yarn`."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, or a secrets backend error
        raise AirflowException(
            f"Spark connection {conn_id!r} is not defined ({exc}). Fix: set AIRFLOW_CONN_{conn_id.upper()}, e.g. "
            f'\'{{"conn_type": "spark", "host": "local[2]"}}\' or \'spark://spark-master:7077\' '
            "(the Makefile sets local[2]; docker-compose.yaml points it at the Spark master)"
        ) from None
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def engine_remote() -> str | None:
    """The engine Airflow's Spark tasks run on, as a SPARK_REMOTE value: the Airflow connection
    `spark_connect_millpond` (the Spark provider's Spark Connect type: host, port, and the engine's token as its
    password), else the worker's own SPARK_REMOTE; None when neither names one (the task uses spark-submit). Airflow
    masks a connection's password in task logs.

    Airflow reports a connection it cannot read (a secrets backend's error, malformed JSON) as not defined; one set
    in the environment is named there, so an unreadable one is an error here, never a silent fall back to
    spark-submit."""
    try:
        return SparkConnectHook(ENGINE_CONN_ID).get_connection_url()
    except AirflowNotFoundException as exc:
        variable = f"AIRFLOW_CONN_{ENGINE_CONN_ID.upper()}"
        if os.environ.get(variable, "").strip():
            raise AirflowException(
                f"{variable} is set, but Airflow cannot read it as a connection ({exc}). Fix: set it to the line "
                "`millpond engine start --airflow-connection` prints (JSON: conn_type spark_connect, host, port, "
                "password), or unset it to use SPARK_REMOTE"
            ) from None
        return connect_server.remote()


def job_env() -> dict[str, str]:
    """Where the job finds specs, suites, jars and the lake: absolute, resolved here, not inside the zip."""
    return {
        "MILLPOND_PROJECT": str(settings.project_root()),
        "MILLPOND_LAKE": str(paths.lake_root()),  # an s3a:// lake as its URL, a folder resolved
        "MILLPOND_PIPELINES": str(settings.pipelines_dir()),
        "MILLPOND_EXPECTATIONS": str(settings.expectations_dir()),
        "MILLPOND_JARS": str(settings.jars_dir()),
        "MILLPOND_REPORT_ASSETS": str(settings.report_assets_dir()),
        **speedups.settings_in_environment(),
    }


def spark_conf(master: str) -> dict[str, str]:
    """The session conf every millpond application shares (the job sets it itself outside spark-submit), with an
    object-store lake's s3a settings and, under a local master, its jars on the driver's classpath."""
    launch = {k: v for k, v in s3a.launch_conf(master).items() if k != "spark.jars"}  # those go to --jars
    return {
        **base_conf(),
        **s3a.session_conf(),
        **launch,
        "spark.ui.enabled": settings.SPARK_UI.value(),
        "spark.log.level": settings.SPARK_LOG_LEVEL.raw() or "WARN",
    }


def lake_jars(master: str) -> list[str]:
    """Jars spark-submit ships to a cluster's executors for the lake: the s3a jars for an object-store lake under
    a cluster master, else none (a local master has them on the driver's classpath: spark_conf)."""
    return [j for j in s3a.launch_conf(master).get("spark.jars", "").split(",") if j]


def lake_access_env() -> dict[str, str]:
    """The standard `AWS_*` variables for an object-store lake, from the Airflow connection `aws_millpond` (an AWS
    connection: login = access key id, password = secret key, extra `endpoint_url`, `region_name`,
    `aws_session_token`). {} for a local lake, or when the connection is not defined: the worker's own
    environment then reaches the store (an instance role, or AWS_* set for the worker).

    They reach the job as environment variables, never as Spark settings or arguments (millpond.driver.s3a), and
    Airflow masks a connection's password in task logs."""
    if not s3a.lake_on_object_store():
        return {}
    try:
        conn = BaseHook.get_connection(AWS_CONN_ID)
    except Exception:  # AirflowNotFoundException, or a secrets backend error: the worker's environment
        return {}
    extra = conn.extra_dejson
    found = {
        "AWS_ACCESS_KEY_ID": conn.login,
        "AWS_SECRET_ACCESS_KEY": conn.password,
        "AWS_SESSION_TOKEN": extra.get("aws_session_token"),
        "AWS_ENDPOINT_URL": extra.get("endpoint_url"),
        "AWS_REGION": extra.get("region_name"),
    }
    return {key: str(value) for key, value in found.items() if value}


# The worker's own variables that would mix with a connection's keys: a session token signs only with the keys it
# came with, and AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL (millpond.lake.object_store).
SHADOWING = ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_PROFILE")


@contextlib.contextmanager
def lake_access() -> Iterator[dict[str, str]]:
    """While a task works: the connection's `AWS_*` (lake_access_env) in this process's environment, for what the
    task reads itself (the no-new-data check, run summaries) and what it starts (spark-submit, the engine's runner
    inherit it); restored afterwards. When the connection has keys, the worker's own token, endpoint, region and
    profile are set aside for the while: the connection alone says how to reach the lake."""
    found = lake_access_env()
    cleared = [key for key in SHADOWING if key not in found] if "AWS_ACCESS_KEY_ID" in found else []
    with process_env.scoped({**dict.fromkeys(cleared), **found}):
        yield found
