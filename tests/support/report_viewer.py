"""The report viewer (millpond.airflow.plugin) as the API server mounts it, and a token its auth manager accepts:
for tests that request report pages without a running Airflow."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI
from fastapi.testclient import TestClient

from millpond.airflow.plugin import MillpondPlugin


def admin_token() -> str:
    """A JWT of the configured auth manager (SimpleAuthManager), as `POST /auth/token` makes it."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.utils.db import upgradedb

    upgradedb()  # `airflow db migrate` of the test session's AIRFLOW_HOME: token checks read `revoked_token`
    manager = init_auth_manager()
    return manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))


@contextmanager
def viewer_client() -> Iterator[TestClient]:
    root = FastAPI()
    for sub in MillpondPlugin().fastapi_apps:
        root.mount(sub["url_prefix"], sub["app"])  # what airflow.api_fastapi.app.init_plugins does
    with TestClient(root, base_url="http://airflow.test") as http:
        yield http
