"""Run ids: Airflow's, or one `millpond run` makes itself, told apart so that a report links only Airflow's runs."""

from __future__ import annotations

from datetime import UTC, datetime

CLI_RUN_ID_FORMAT = "manual__%Y-%m-%dT%H:%M:%S.%fZ"  # a `millpond run` without --run-id; Airflow's ids end "+00:00"


def cli_run_id() -> str:
    return datetime.now(UTC).strftime(CLI_RUN_ID_FORMAT)


def is_cli_run_id(run_id: str) -> bool:
    """Whether the run was started by `millpond run` itself (no Airflow run to link to)."""
    try:
        datetime.strptime(run_id, CLI_RUN_ID_FORMAT)
    except ValueError:
        return False
    return True
