"""The gate's reports open in a real headless browser (Debian's chromium) and name the failing expectation.

Not skipped when chromium is missing: `make test` installs it first (`make browser`); a missing browser is a
broken setup, and a skipped test would hide that the reports were never looked at.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from millpond import reports
from millpond.spec import load_pipeline

pytestmark = pytest.mark.integration

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("chromium is not installed. Fix: `make browser` (apt-get install -y chromium)")


def render(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The DOM after the page's scripts ran (Data Docs renders with JavaScript)."""
    args = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
    args += [f"--screenshot={screenshot}", "--window-size=1280,1600"] if screenshot else ["--dump-dom"]
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_data_docs_and_index_render_and_name_the_failing_expectation(spark, lake, tmp_path):
    from spark_jobs.quality import Gate

    table = load_pipeline("activity").tables["silver.activity"]
    batch = spark.sql(
        "SELECT * FROM VALUES ('nexus4_1', 1L, TIMESTAMP'2026-11-01 00:00:01', 'walk', 0.1D, 0.2D, 9.8D),"
        " ('nexus4_1', 2L, TIMESTAMP'2026-11-01 00:00:02', 'fly', 0.1D, 0.2D, 9.8D),"
        " ('nexus4_2', 3L, TIMESTAMP'2026-11-01 00:00:03', 'sit', 99.0D, 0.2D, 9.8D)"
        " AS t(Device, Index, Recorded_At, gt, x, y, z)"
    )
    gate = Gate(spark, "activity", table, "browser-run")
    report = gate.validate(batch, 0)
    gate.publish(report)
    assert report.outcome == "failed"
    page = Path(report.report_path)
    assert page.is_file() and page.is_relative_to(reports.reports_dir())
    assert (reports.docs_dir() / "expectations" / "activity" / "silver" / "activity.html").is_file()  # linked suite

    dom = render(page.as_uri(), tmp_path / "profile")
    assert "expect_column_values_to_be_in_set(gt) · severity fail" in dom  # the failing expectation, named
    assert "fly" in dom  # its unexpected value (GX's sample of the failing rows' values)
    assert "Failed" in dom

    index = render(reports.index_path().as_uri(), tmp_path / "profile")
    assert "silver.activity" in index and "browser-run" in index
    assert "expect_column_values_to_be_in_set(gt)" in index and '"gt":"fly"' in index  # sample row in the index
    assert "<svg" in index and page.relative_to(reports.reports_dir()).as_posix() in index

    shot = tmp_path / "index.png"
    render(reports.index_path().as_uri(), tmp_path / "profile", screenshot=shot)
    assert shot.stat().st_size > 5000  # a rendered page, not a blank one
