"""Every speed-up against the standard path it replaces, end to end: the activity pipeline runs twice on the same
landed files, hostile lines included, once with every speed-up on (the default) and once with each one off
(MILLPOND_JSON_FUNCTIONS=off, MILLPOND_DELTA_RS_COMMITS=off, MILLPOND_DRIVER_JIT=off, MILLPOND_CLASS_ARCHIVE=off),
over two rounds so that the delta-rs commits (an existing gold table, an existing quarantine) are taken. Every
table, quarantine and event-log count must be the same."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files
from millpond.driver import class_archive
from millpond.lake import paths
from tests.support.lake_tables import data_commits_without_txn
from tests.support.stress import MILLPOND

pytestmark = pytest.mark.integration

STANDARD = {
    "MILLPOND_JSON_FUNCTIONS": "off",
    "MILLPOND_DELTA_RS_COMMITS": "off",
    "MILLPOND_DRIVER_JIT": "off",
    "MILLPOND_CLASS_ARCHIVE": "off",
}
# Lines a hand-made JSON scanner gets wrong, in the activity source's shape (Spark's default json options).
HOSTILE = [
    "{'Device':'q1','Index':1,'Recorded_At':'2026-11-01T10:00:00Z','extra':5}",
    '{"Device": "q2", "Index": 2, "Recorded_At": "2026-11-01T10:00:01Z", "note": "he said \\"zz\\": 1"}',
    "{'Device': 'q3', 'Index': 3, 'Recorded_At': '2026-11-01T10:00:02Z', 'note': 'x \"yy\": 2'}",
    '{"Device": "q4", "Index": 4, "Recorded_At": "2026-11-01T10:00:03Z", "dev\\u0069ce2": "\\u00e9"}',
    '{"Device": "q5", "Device": "q5b", "Index": 5, "Recorded_At": "2026-11-01T10:00:04Z", "k": 1, "k": [2]}',
    '{"Device": "q6", "Index": 6, "Recorded_At": "2026-11-01T10:00:05Z", "nested": {"a": {"b": 1}, "a": 2}}',
    '{"Device": "q7", "Index": 7, /* comment */ "Recorded_At": "2026-11-01T10:00:06Z"}',
    '{Device: "q8", Index: 8, Recorded_At: "2026-11-01T10:00:07Z"}',
    '{"Device": "q9", "Index": 9, "Recorded_At": "2026-11-01 10:00:08", "x": 1e400, "y": NaN, "z": "1.5"}',
    '{"Device": "q10", "Index": "ten", "Recorded_At": "2026-11-01T10:00:09Z"}',
]


def land(landing: Path, round_number: int) -> None:
    activity_files(landing, 2, 400, duplicates=0.05, malformed=0.02, seed=70 + round_number)
    lines = [line.replace("'Index':1", f"'Index':{round_number}1") for line in HOSTILE]
    (landing / f".hostile-{round_number}.json.tmp").write_text("\n".join(lines) + "\n")
    (landing / f".hostile-{round_number}.json.tmp").rename(landing / f"hostile-{round_number}.json")


def run(lake: Path, settings: dict[str, str]) -> str:
    env = {**os.environ, "MILLPOND_LAKE": str(lake), **settings}
    for name in STANDARD:
        if name not in settings:
            env.pop(name, None)
    proc = subprocess.run([MILLPOND, "run", "activity"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def contents(spark, lake: Path) -> dict[str, list]:
    """Every pipeline table and quarantine as sorted rows: times of ingestion and run ids dropped, file paths made
    relative to the lake (the two lakes differ only there), and `_rescued_data` as a JSON reader reads it (the fast
    path keeps a number's text, 1.50 where Spark's variant writes 1.5, and writes a repeated key once with its last
    value, which is the value a reader takes from the standard path's two)."""
    from pyspark.sql import functions as F

    found = {}
    for table_id in ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly"):
        for path in (paths.table_path(table_id, lake), paths.quarantine_path(table_id, lake)):
            if not (path / "_delta_log").is_dir():
                continue
            df = spark.read.format("delta").load(str(path))
            df = df.drop(*[c for c in ("_ingested_at", "quarantined_at", "run_id") if c in df.columns])
            for column in ("_source_file", "source_file"):
                if column in df.columns:
                    df = df.withColumn(column, F.regexp_replace(column, r"^.*/landing/", "landing/"))
            rows = [row.asDict() for row in df.collect()]
            for row in rows:
                if row.get("_rescued_data"):
                    row["_rescued_data"] = json.loads(row["_rescued_data"])
            found[path.relative_to(lake).as_posix()] = sorted(map(repr, rows))
    return found


def test_the_pipeline_gives_the_same_tables_with_every_speed_up_on_and_off(spark, tmp_path):
    fast, standard = tmp_path / "fast", tmp_path / "standard"
    said = {}
    for round_number in range(2):
        for lake, settings in ((fast, {}), (standard, STANDARD)):
            land(lake / "landing" / "activity", round_number)
            said[lake] = run(lake, settings)
    # Each JVM said what it started with: the fast side on the archive `make setup` built, the standard side without.
    archive = class_archive.archive_path()
    assert f"millpond: class archive {archive}\n" in said[fast], said[fast][-3000:]
    assert "millpond: class archive none\n" in said[standard], said[standard][-3000:]
    fast_tables, standard_tables = contents(spark, fast), contents(spark, standard)
    assert fast_tables.keys() == standard_tables.keys()
    differ = {
        name: (sorted(set(rows) - set(standard_tables[name]))[:3], sorted(set(standard_tables[name]) - set(rows))[:3])
        for name, rows in fast_tables.items()
        if rows != standard_tables[name]
    }
    assert differ == {}
    bronze = fast_tables["bronze/activity"]
    assert any("'_rescued_data': {'extra': 5}" in row for row in bronze)  # the single-quoted line's new field
    assert len(fast_tables["bronze/activity_quarantine"]) >= 20  # malformed lines on both paths, reconciled
    history = spark.sql(f"DESCRIBE HISTORY delta.`{paths.table_path('gold.device_counts', fast)}`").collect()
    assert any(h.engineInfo.startswith("delta-rs") for h in history)  # the fast side took the delta-rs path
    standard_history = spark.sql(f"DESCRIBE HISTORY delta.`{paths.table_path('gold.device_counts', standard)}`")
    assert not any(h.engineInfo.startswith("delta-rs") for h in standard_history.collect())
    assert data_commits_without_txn(fast) == data_commits_without_txn(standard) == []
