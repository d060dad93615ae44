"""The gate's index page over time: per table, each expectation's pass/fail over the last runs, what was waiting when
each run started, the rows validated and set aside per run, and links to each run's Data Docs and its Airflow run. (Rendering:
tests/integration/quality_gate/test_reports_browser.py.)"""

from __future__ import annotations

import re

import pytest

from millpond.runs import reports

pytestmark = pytest.mark.unit


def entry(run_id: str, batch_id: int, gt_ok: bool, rows: int, dropped: int, hour: int) -> dict:
    report = reports.docs_dir() / "validations" / run_id / f"batch{batch_id}.html"
    return {
        "pipeline": "activity",
        "table": "silver.activity",
        "suite": "activity.silver.activity",
        "run_id": run_id,
        "batch_id": batch_id,
        "mode": "run",
        "outcome": "passed" if gt_ok else "failed",
        "element_count": rows,
        "rows_dropped": dropped,
        "report_path": str(report),
        "validated_at": f"2026-11-02T{hour:02d}:00:00+00:00",
        "expectations": [
            {"expectation": "not_null(Device)", "severity": "fail", "success": True, "unexpected_count": 0},
            {"expectation": "in_set(gt)", "severity": "warn", "success": gt_ok, "unexpected_count": 0 if gt_ok else 3},
        ],
    }


def cells(row_html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row_html)]


def test_the_index_shows_each_expectation_over_the_last_runs_with_counts_and_links(lake):
    runs = [
        ("scheduled__2026-11-02T01:00:00+00:00", [(True, 100, 0)]),
        ("scheduled__2026-11-02T02:00:00+00:00", [(True, 50, 2), (False, 40, 1)]),  # two batches, one warned
        ("manual__2026-11-02T03:30:00+00:00", [(True, 10, 0)]),
    ]
    hour = 0
    for number, (run_id, batches) in enumerate(runs):
        for batch_id, (ok, rows, dropped) in enumerate(batches):
            hour += 1
            recorded = entry(run_id, batch_id, ok, rows, dropped, hour)
            if number:  # the first run was recorded before runs kept their backlog; a run's batches share it
                recorded["backlog"] = {"files": None, "bytes": None, "rows": 40 * number, "batches": number}
            reports.record(recorded)
    page = reports.index_path().read_text()
    grid = re.search(r'<table class="history">(.*?)</table>', page, re.S).group(1)
    header = re.sub(r"<[^>]+>", " ", re.search(r"<thead>(.*?)</thead>", grid).group(1)).split()
    assert header == ["expectation", *[run_id for run_id, _ in reversed(runs)]]  # newest first
    rows = {re.search(r"<th>(.*?)</th>", r).group(1): cells(r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", grid)[1:]}
    assert rows["not_null(Device)"] == ["✓ pass"] * 3
    assert rows["in_set(gt)"] == ["✓ pass", "✗ warn (3)", "✓ pass"]  # the run's second batch failed it
    assert rows["waiting when the run started"] == ["80 rows, 2 batch(es)", "40 rows, 1 batch(es)", "–"]
    assert rows["rows validated"] == ["10", "90", "100"]
    assert rows["rows set aside (dropped or quarantined)"] == ["0", "3", "0"]
    assert rows["report"] == ["Data Docs"] * 3
    links = re.findall(r'<a href="([^"]+)">(Data Docs|Airflow run)</a>', grid)
    assert ("datadocs/validations/manual__2026-11-02T03:30:00+00:00/batch0.html", "Data Docs") in links
    assert ("/dags/activity/runs/scheduled__2026-11-02T02%3A00%3A00%2B00%3A00", "Airflow run") in links
    assert len([1 for _, kind in links if kind == "Airflow run"]) == 3
