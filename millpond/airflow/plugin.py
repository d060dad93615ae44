"""The Airflow plugin that makes gate reports one click away from a DAG run, behind Airflow's own login.

    /millpond/reports/<path>                    a file under `$MILLPOND_LAKE/_reports/` (index.html, Data Docs)
    /millpond/reports/runs/<dag_id>/<run_id>    redirects to that run's report (the index page if it has none)

Why served by the API server and not as `file://` links: browsers do not open `file://` links from an http page, and
the lake is usually not on the user's machine. The sub-app reuses the API server's authentication (the JWT the UI
keeps in its `_token` cookie, or a bearer token) and asks the auth manager whether the user may read DAG runs, so
anonymous requests get 401 like `/api/v2`. Paths are resolved inside the reports folder: `..`, absolute paths and
symlinks that leave it are refused. On an object-store lake the same pages are read from the bucket, with the
API server's own access to it (the standard AWS_* variables; it does not read the `aws_millpond` connection).

In the UI: the task instances of `quality_gate`, `ingest` and `gold` carry an extra link "Data-quality report"
(its URL is computed when the task finishes and stored as an XCom, the Airflow 3 way), and each DAG run page has a
"Data-quality report" tab that embeds the run's report.

Every Airflow process imports this module (the task runner loads plugins for macros), so it stays light:
FastAPI and the API server's security module load only when the API server asks for `fastapi_apps`.
"""

# No `from __future__ import annotations`: FastAPI reads the annotations of the route functions defined inside
# create_app(), and postponed (string) annotations would not resolve from this module's globals.
import mimetypes
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink

from millpond.lake import paths, storage
from millpond.lake.paths import LakePath
from millpond.runs import reports, run_summary

if TYPE_CHECKING:
    from fastapi import FastAPI

# Imported inside functions: Airflow's API server and FastAPI only inside the web app: the DAG processor imports this
# module (through the operators' report link) every 30 s.

MOUNT = "/millpond/reports"
LINK_NAME = "Data-quality report"


# ---------------------------------------------------------------------------------------------- which report


def run_report(pipeline: str, run_id: str) -> LakePath | None:
    """The report file of one run: a table the gate stopped first, else one that warned or set rows aside, else any."""
    summary = run_summary.load(pipeline, run_id) or {}
    gated = [t for t in summary.get("tables", []) if (t.get("gate") or {}).get("report_path")]
    gated.sort(key=lambda t: (t.get("outcome") != "gate_failed", (t["gate"].get("outcome") or "passed") == "passed"))
    for entry in gated:
        path = paths.as_lake_path(entry["gate"]["report_path"])
        if path.is_file():
            return path
    return None


def report_url_path(path: LakePath | None, root: LakePath | None = None) -> str:
    """The URL path (under MOUNT) of a report file; the index page when there is none or it lies outside the folder."""
    base = reports.reports_dir(root)
    try:
        if path is None:
            relative = "index.html"
        else:
            relative = storage.relative_location(path, base)
    except ValueError:
        relative = "index.html"
    return f"{MOUNT}/{quote(relative)}"


class ReportLink(BaseOperatorLink):
    """The task's "Data-quality report" button: this run's gate report, relative to the Airflow base URL.

    Airflow 3 calls `get_link` in the worker when the task ends (also when it failed, which is when the report matters
    most) and stores the URL as the XCom `_link_ReportLink`; the API server only reads that XCom back. So the class
    needs no plugin registration, and the link shows the report of the run that task instance belonged to. No
    leading slash: the UI page has `<base href="{base url}/">`, so the link also works behind a proxy sub-path.
    """

    name = LINK_NAME

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from millpond.airflow.spark_app import lake_access  # the task's lake credentials (a connection lookup)

        with lake_access():
            report = run_report(*run_summary.dag_run_key(operator.dag_id, ti_key.run_id))
        return report_url_path(report).lstrip("/")


# ---------------------------------------------------------------------------------------------- the web app


def resolve_report(relative: str, root: LakePath | None = None) -> LakePath | None:
    """A file inside the reports folder for a URL path, or None (millpond.lake.storage.file_under: no `..`, no
    absolute path, no symlink escaping it)."""
    return storage.file_under(reports.reports_dir(root), relative)


@cache
def create_app() -> "FastAPI":
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import Depends, FastAPI, HTTPException, Request, status
    from fastapi.responses import RedirectResponse, Response

    def may_read_runs(request: Request, user: GetUserDep) -> None:
        """401 without a valid token (from `get_user`); 403 unless the user may read runs of this DAG (or of all)."""
        dag_id = request.path_params.get("dag_id")
        team = None
        if dag_id:
            from airflow.models.dag import DagModel

            team = DagModel.get_team_name(dag_id)
        allowed = get_auth_manager().is_authorized_dag(
            method="GET", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag_id, team_name=team), user=user
        )
        if not allowed:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")

    app = FastAPI(
        title="millpond data-quality reports",
        dependencies=[Depends(may_read_runs)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.get("/runs/{dag_id}/{run_id}")
    def run_report_page(dag_id: str, run_id: str, request: Request) -> RedirectResponse:
        target = report_url_path(run_report(*run_summary.dag_run_key(dag_id, run_id))).removeprefix(MOUNT)
        return RedirectResponse(
            request.scope.get("root_path", "") + target, status_code=status.HTTP_307_TEMPORARY_REDIRECT
        )

    @app.get("/{relative:path}")
    def report_file(relative: str) -> Response:
        path = resolve_report(relative)
        if path is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no report at {relative!r} under $MILLPOND_LAKE/_reports")
        headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return Response(path.read_bytes(), media_type=kind, headers=headers)  # reports are small pages and assets

    return app


class MillpondPlugin(AirflowPlugin):
    name = "millpond"
    # Each DAG run page gets a tab embedding that run's report (the UI substitutes the ids; no leading slash: the
    # UI resolves it against its base URL).
    external_views = [
        {
            "name": LINK_NAME,
            "href": MOUNT.lstrip("/") + "/runs/{DAG_ID}/{RUN_ID}",
            "destination": "dag_run",
            "url_route": "data-quality-report",
        },
        {
            "name": "Data-quality reports",
            "href": MOUNT.lstrip("/") + "/index.html",
            "destination": "nav",
            "category": "browse",
        },
    ]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"app": create_app(), "url_prefix": MOUNT, "name": "millpond data-quality reports"}]
