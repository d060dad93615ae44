"""Smoke of the benchmark harness (`make bench`): a tiny scale runs end to end and writes well-formed results.

Timings are never asserted here (docs/benchmarks.md: goals are judged by `make bench SCALE=large`); this only
proves the harness measures both sides and records what the README quotes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO

pytestmark = pytest.mark.integration


def test_tiny_scale_measures_both_sides_and_writes_results(tmp_path):
    out = tmp_path / "results-tiny.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--scale", "tiny", "--only", "B3,B4,B6", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["scale"] == "tiny" and results["machine"]["cores"] >= 1
    assert set(results["versions"]) >= {"pyspark", "delta-spark", "apache-airflow", "duckdb"}
    b3, b6 = results["benchmarks"]["B3"], results["benchmarks"]["B6"]
    assert b3["goal"] == {"min": 0.8} and b6["goal"] == {"max": 0.3}
    detail = b3["detail"]
    assert detail["ours_seconds"]["n"] == detail["plain_spark_seconds"]["n"] == 1
    assert b3["ratio"] == round(detail["plain_spark_seconds"]["median"] / detail["ours_seconds"]["median"], 3)
    # Both read every landed line; the plain job keeps the well-formed ones, as bronze does (both checked against
    # the reference before the figures were written).
    assert detail["ours_rows_in"] == 4 * 200 and 0 < detail["rows"] <= 4 * 200
    assert detail["checked_against_reference"] == {"millpond": ["bronze", "quarantine"], "plain_spark": ["bronze"]}
    assert b3["met"] == (b3["ratio"] >= 0.8) and b6["met"] == (b6["ratio"] <= 0.3)
    assert b6["detail"]["dags"] >= 1 and b6["detail"]["parse_seconds"]["n"] == 5
    b4 = results["benchmarks"]["B4"]  # millpond ÷ plain Spark doing the same work; DuckDB a reference, no goal
    assert b4["goal"] == {"max": 1.5} and b4["met"] == (b4["ratio"] <= 1.5)
    d4 = b4["detail"]
    assert d4["ours_seconds"]["n"] == d4["duckdb_seconds"]["n"] == d4["plain_spark_seconds"]["n"] == 1
    assert b4["ratio"] == round(d4["ours_seconds"]["median"] / d4["plain_spark_seconds"]["median"], 2)
    assert d4["ours_over_duckdb"] == round(d4["ours_seconds"]["median"] / d4["duckdb_seconds"]["median"], 2)
    assert set(d4["checked_against_reference"]) == {"millpond", "plain_spark", "duckdb"}
    table = out.with_suffix(".md").read_text()
    assert "| B3 |" in table and "| B4 |" in table and "| B6 |" in table and "make bench SCALE=tiny" in table
