"""The millpond Spark application as a task submits it: the runner's file, the Spark connection, the environment
and conf the job gets, and what the runner's exit codes mean.

Shared by the operator (which resolves them when its task runs) and the hook (which reads the exit codes); light, so
the operator module can import it while the DAG file is parsed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

from millpond import settings
from millpond.engine import speedups

SPARK_CONN_ID = "spark_millpond"
EXIT_CODES = {
    1: "a table failed",
    2: "invalid spec or arguments",
    3: "pipeline busy (another writer holds the lock)",
    4: "a quality gate failed",
    5: "the engine (SPARK_REMOTE) runs other code than this run, or does not answer",
}
STOPPED = "the Spark application was stopped (task killed, timed out or marked failed)"


def module_file(name: str) -> Path:
    """A module's file, found without importing it: the runner imports pyspark, which DAG parsing must not."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"{name} is not installed")
    return Path(spec.origin)


RUNNER = module_file("millpond.engine.runner")  # spark-submit's application


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


def job_env() -> dict[str, str]:
    """Where the job finds specs, suites, jars and the lake: absolute, resolved here, not inside the zip."""
    return {
        "MILLPOND_PROJECT": str(settings.project_root()),
        "MILLPOND_LAKE": str(settings.lake_root()),
        "MILLPOND_PIPELINES": str(settings.pipelines_dir()),
        "MILLPOND_EXPECTATIONS": str(settings.expectations_dir()),
        "MILLPOND_JARS": str(settings.jars_dir()),
        "MILLPOND_REPORT_ASSETS": str(settings.report_assets_dir()),
        **speedups.settings_in_environment(),
    }


def spark_conf() -> dict[str, str]:
    """The session conf every millpond application shares (the job sets it itself outside spark-submit)."""
    from millpond.engine.session import base_conf  # imports pyspark: only at task run time

    return {
        **base_conf(),
        "spark.ui.enabled": settings.SPARK_UI.value(),
        "spark.log.level": settings.SPARK_LOG_LEVEL.raw() or "WARN",
    }
