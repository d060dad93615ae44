"""The report pages the millpond Airflow plugin serves, through Airflow's real auth manager and JWTs (no API server).

The sub-app is mounted at the same prefix the API server uses; tokens come from the configured auth manager
(SimpleAuthManager), exactly as `POST /auth/token` makes them. tests/integration/airflow/test_make_up.py checks the
same against a running Airflow, tests/integration/airflow/test_dag_runs.py the link a real gate run stores.
"""

from __future__ import annotations

import importlib.metadata
import os

import pytest
from fastapi.testclient import TestClient

from millpond.airflow.plugin import MOUNT, MillpondPlugin, ReportLink, report_url_path
from millpond.runs import reports, run_summary
from tests.support.report_viewer import admin_token, viewer_client

pytestmark = pytest.mark.unit

PAGE = "<html><body>gate report for batch 3</body></html>"


@pytest.fixture(scope="module")
def token() -> str:
    return admin_token()


@pytest.fixture
def client(lake, token):
    with viewer_client() as http:
        yield http


@pytest.fixture
def report(lake):
    page = reports.docs_dir() / "validations" / "activity" / "silver" / "activity" / "run-1" / "report.html"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE)
    reports.write_index()
    return page


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_plugin_is_an_installed_airflow_entry_point():
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="airflow.plugins")}
    assert found.get("millpond") == "millpond.airflow.plugin:MillpondPlugin", found
    [entry_point] = importlib.metadata.entry_points(group="airflow.plugins", name="millpond")
    assert entry_point.load() is MillpondPlugin


def test_serves_a_report_and_the_index_to_a_logged_in_user(client, token, report):
    url = f"{MOUNT}/datadocs/validations/activity/silver/activity/run-1/report.html"
    page = client.get(url, headers=auth(token))
    assert page.status_code == 200, page.text
    assert page.text == PAGE and page.headers["content-type"].startswith("text/html")

    # The UI's way: the JWT in the `_token` cookie, no header.
    client.cookies.set("_token", token)
    assert client.get(url).text == PAGE
    index = client.get(f"{MOUNT}/index.html")
    assert index.status_code == 200 and "millpond data-quality gate" in index.text
    assert client.get(f"{MOUNT}/").text == index.text


def test_refuses_anonymous_and_forged_tokens(client, token, report):
    url = f"{MOUNT}/index.html"
    assert client.get(url).status_code == 401
    assert client.get(url, headers=auth(token[:-4] + "AAAA")).status_code in (401, 403)
    client.cookies.set("_token", "not-a-jwt")
    assert client.get(url).status_code in (401, 403)
    # Refused before any path handling: a missing file does not answer 404 to strangers.
    assert TestClient(client.app).get(f"{MOUNT}/nope.html").status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "../secret.txt",  # the client normalises a plain `..` away: these are what an attacker sends instead
        "%2E%2E/secret.txt",
        "..%2Fsecret.txt",
        "datadocs/%2E%2E/%2E%2E/secret.txt",
        "%2Fetc%2Fpasswd",
        "/etc/passwd",
        "datadocs%5C..%5C..%5Csecret.txt",
        "escape/secret.txt",  # a symlink inside the folder pointing out of it
        "escaped.html",  # a symlinked file pointing out of it
        "datadocs",  # a folder without its slash (its page's relative links would break)
    ],
)
def test_refuses_everything_outside_the_reports_folder(client, token, report, lake, path):
    (lake / "secret.txt").write_text("lake secret")
    (reports.reports_dir() / "escape").symlink_to(lake, target_is_directory=True)
    (reports.reports_dir() / "escaped.html").symlink_to(lake / "secret.txt")
    resp = client.get(f"{MOUNT}/{path}", headers=auth(token))
    assert resp.status_code in (400, 404), (path, resp.status_code, resp.text)
    assert "lake secret" not in resp.text


def test_the_gate_tasks_link_points_at_the_runs_report(lake, report):
    from airflow.models.taskinstancekey import TaskInstanceKey

    from millpond.airflow.factory import build_all

    dag = build_all()["activity"]
    assert {t.task_id for t in dag.tasks if any(isinstance(x, ReportLink) for x in t.operator_extra_links)} == {
        "ingest",
        "quality_gate",
        "gold",
    }
    gate = dag.get_task("quality_gate")
    key = TaskInstanceKey(dag_id="activity", task_id="quality_gate", run_id="manual__1")
    [link] = gate.operator_extra_links
    # No summary for the run (ingest did not get that far): the index page.
    assert link.get_link(gate, ti_key=key) == "millpond/reports/index.html"
    run_summary.merge(
        "activity",
        "manual__1",
        "manual",
        [
            {"table": "bronze.activity", "outcome": "succeeded"},
            {
                "table": "silver.activity",
                "outcome": "gate_failed",
                "gate": {"outcome": "failed", "report_path": str(report), "index_path": str(reports.index_path())},
            },
        ],
    )
    url = "millpond/reports/datadocs/validations/activity/silver/activity/run-1/report.html"
    assert link.get_link(gate, ti_key=key) == url
    # A report that is gone (lake cleaned) or outside the folder: the index again.
    report.unlink()
    assert link.get_link(gate, ti_key=key) == "millpond/reports/index.html"
    assert report_url_path(lake / "elsewhere.html") == f"{MOUNT}/index.html"


def test_the_plugin_module_stays_light():
    """Every Airflow process (also each task) imports the plugin: FastAPI and the API server load only on demand."""
    import subprocess
    import sys

    code = (
        "import sys, millpond.airflow.plugin as p; p.MillpondPlugin.external_views; "
        "print(sorted(m for m in ('fastapi', 'airflow.api_fastapi.core_api.security') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
