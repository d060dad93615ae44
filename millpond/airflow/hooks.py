"""spark-submit whose whole process tree dies with its task, and whose failure says what the runner's exit means.

Imported only when a task runs (MillpondSparkSubmitOperator.build_hook): the Spark provider's hook module pulls in
`requests` and friends, which DAG parsing would otherwise pay every 30 s (docs/benchmarks.md, B6).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException

from millpond.airflow.processes import die_with_parent, kill_tree
from millpond.airflow.spark_app import EXIT_CODES, STOPPED


class MillpondSparkSubmitHook(SparkSubmitHook):
    """spark-submit whose whole process tree (JVM + Python driver) dies with the task; its exit says why."""

    killed = False

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        kwargs.setdefault("preexec_fn", die_with_parent)
        try:
            driver_id = super().submit(application, **kwargs)
        except AirflowException as exc:
            if self.killed:
                raise AirflowException(STOPPED) from None
            process = getattr(self, "_submit_sp", None)  # the spark-submit Popen, once started
            code = process.returncode if process is not None else None
            reason = EXIT_CODES.get(code or 0)
            if reason:
                raise AirflowException(f"millpond runner exited {code}: {reason}.\n{exc}") from None
            raise
        if self.killed:  # the JVM may exit 0 after its shutdown hooks ran
            raise AirflowException(STOPPED)
        return driver_id

    def on_kill(self) -> None:
        """Stop the spark-submit JVM AND its Python driver (which holds the pipeline lock)."""
        process = getattr(self, "_submit_sp", None)
        if process is not None and process.poll() is None:
            self.killed = True
            self.log.info("Stopping spark-submit pid %s and its children", process.pid)
            kill_tree(process.pid)
        super().on_kill()
