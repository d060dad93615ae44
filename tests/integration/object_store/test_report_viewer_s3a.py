"""The report viewer (the Airflow plugin's pages) on an s3a lake: pages read from the bucket through the same
authenticated routes, with the API server's own AWS_* variables, and nothing outside the reports prefix served."""

from __future__ import annotations

import pytest

from millpond.airflow.plugin import MOUNT
from millpond.lake import paths
from millpond.runs import reports
from tests.support.report_viewer import admin_token, viewer_client

pytestmark = pytest.mark.integration

PAGE = "<html><body>gate report for batch 3 on s3a</body></html>"
UNSAFE = (
    "%2E%2E/secret.txt",
    "..%2Fsecret.txt",
    "datadocs/%2E%2E/%2E%2E/secret.txt",
    "%2Fsecret.txt",
    "datadocs%5C..%5C..%5Csecret.txt",
    "datadocs",  # a "folder" without its slash
    "datadocs/nope.html",
)


def test_report_pages_are_served_from_the_bucket_and_nothing_outside_the_reports_prefix(s3_bucket, monkeypatch):
    monkeypatch.setenv("MILLPOND_LAKE", f"s3a://{s3_bucket.name}/lake")
    page = reports.docs_dir() / "validations" / "activity" / "silver" / "activity" / "run-1" / "report.html"
    page.write_text(PAGE)
    (paths.lake_root() / "secret.txt").write_text("lake secret")
    reports.write_index()
    headers = {"Authorization": f"Bearer {admin_token()}"}
    with viewer_client() as client:
        served = client.get(f"{MOUNT}/datadocs/validations/activity/silver/activity/run-1/report.html", headers=headers)
        assert served.status_code == 200, served.text
        assert served.text == PAGE and served.headers["content-type"].startswith("text/html")
        assert served.headers["x-content-type-options"] == "nosniff"
        index = client.get(f"{MOUNT}/index.html", headers=headers)
        assert index.status_code == 200 and "millpond data-quality gate" in index.text
        assert client.get(f"{MOUNT}/", headers=headers).text == index.text
        assert client.get(f"{MOUNT}/index.html").status_code == 401  # the bucket's pages need a login too
        for path in UNSAFE:
            refused = client.get(f"{MOUNT}/{path}", headers=headers)
            assert refused.status_code in (400, 404), (path, refused.status_code, refused.text)
            assert "lake secret" not in refused.text
