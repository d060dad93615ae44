"""The gate's reports open in a real headless browser (Debian's chromium) and name the failing expectation.

Not skipped when chromium is missing: `make test` stops before any test (`make browser`), naming the install
command; a missing browser is a broken setup, and a skipped test would hide that the reports were never looked at.
"""

from __future__ import annotations

import html
import shutil
import subprocess
from pathlib import Path

import pytest

from millpond.runs import reports
from millpond.spec import load_pipeline

pytestmark = pytest.mark.integration

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("chromium is not installed. Fix: install Chromium (Debian: sudo apt-get install chromium)")


def render(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The DOM after the page's scripts ran (Data Docs renders with JavaScript)."""
    args = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
    args += [f"--screenshot={screenshot}", "--window-size=1280,1600"] if screenshot else ["--dump-dom"]
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_data_docs_and_index_render_and_name_the_failing_expectation(spark, lake, tmp_path):
    from millpond.driver.quality import Gate

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


# Appended to a copy of a Data Docs page (same folder, so its relative links hold): what the browser computed.
PROBE = """<pre id="millpond-probe"></pre><script>
const body = getComputedStyle(document.body);
document.getElementById("millpond-probe").textContent = JSON.stringify({
  margin: body.marginTop, font: body.fontFamily, jquery: typeof window.jQuery,
  bootstrapTable: typeof (window.jQuery && window.jQuery.fn.bootstrapTable),
  icons: [...document.querySelectorAll("i.fas, i.fa")].map(i => getComputedStyle(i).fontFamily).slice(0, 1)});
</script></body>"""


def test_data_docs_load_nothing_from_the_internet_and_render_styled(spark, lake, tmp_path):
    """GX's pages load Bootstrap, jQuery and Font Awesome from CDNs: offline they were unstyled text. Now every
    stylesheet and script is a local file next to the Data Docs, and a real browser applies them."""
    import json
    import re

    from millpond.driver.quality import Gate

    table = load_pipeline("activity").tables["silver.activity"]
    batch = spark.sql(
        "SELECT * FROM VALUES ('nexus4_1', 1L, TIMESTAMP'2026-11-01 00:00:01', 'fly', 0.1D, 0.2D, 9.8D)"
        " AS t(Device, Index, Recorded_At, gt, x, y, z)"
    )
    gate = Gate(spark, "activity", table, "offline-run")
    report = gate.validate(batch, 0)
    gate.publish(report)
    page = Path(report.report_path)
    suite_page = reports.docs_dir() / "expectations" / "activity" / "silver" / "activity.html"
    for shown in (page, suite_page, reports.index_path()):
        assert reports.external_loads(shown) == [], shown
        text = shown.read_text()
        local = re.findall(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["']([^"'#]+)["']""", text)
        assert all((shown.parent / ref).resolve().is_file() for ref in local), [
            ref for ref in local if not (shown.parent / ref).resolve().is_file()
        ]
    assert "vendor/bootstrap/4.3.1/css/bootstrap.min.css" in page.read_text()

    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", PROBE, 1))
    dom = render(probe.as_uri(), tmp_path / "profile")
    seen = json.loads(html.unescape(re.search(r'<pre id="millpond-probe">(.*?)</pre>', dom, re.S).group(1)))
    # Bootstrap's reboot, not the browser's defaults (8px margin, Times); its scripts and the icon font loaded.
    assert seen["margin"] == "0px" and "Times" not in seen["font"], seen
    assert seen["jquery"] == "function" and seen["bootstrapTable"] == "function", seen
    assert all("Font Awesome" in family for family in seen["icons"]), seen
