"""`make demo`, the README's first command, as a newcomer runs it (the venv and jars already set up: `-o setup`):
sample files landed, the activity DAG once through Airflow (`airflow dags test`), the tables named in the catalog and
gold printed by name. Then what `millpond sql` counts by name equals what delta-rs reads at the lake paths, and
`millpond_system.runs` holds the demo run's four tables.

Isolation: a throwaway AIRFLOW_HOME, lake and catalog home (the catalog's in a folder `nobody` can enter: as root,
PostgreSQL runs as `nobody`). Cost: about 90 s (one DAG run with its Spark application, a sync and two queries,
each in a Hive-backed JVM of its own).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.support import REPO
from tests.support.millpond_cli import millpond, sql

pytestmark = pytest.mark.integration

COUNTS = (
    "SELECT (SELECT count(*) FROM gold.device_counts) AS gold, (SELECT count(*) FROM silver.activity) AS silver, "
    "(SELECT count(*) FROM bronze.activity_quarantine) AS quarantined, "
    "(SELECT count(*) FROM millpond_system.event_log) AS events, "
    "(SELECT count(*) FROM millpond_system.runs) AS run_rows, "
    "(SELECT count(DISTINCT run_id) FROM millpond_system.runs) AS runs"
)


def rows_rs(location: Path) -> int:
    return DeltaTable(str(location)).to_pyarrow_table().num_rows


def test_make_demo_names_every_table_and_millpond_sql_counts_them_as_delta_rs_does(tmp_path):
    catalog_parent = Path(tempfile.mkdtemp(prefix="millpond-demo-"))
    catalog_parent.chmod(0o755)
    lake = tmp_path / "lake"
    # Only what a user would have: no AIRFLOW_*/MILLPOND_* of this session, no make state of an outer make.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "MILLPOND_", "PYSPARK", "SPARK_", "MAKE", "MFLAGS", "OPENLINEAGE"))
    }
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "airflow_home"),
        "MILLPOND_LAKE": str(lake),
        "MILLPOND_CATALOG_HOME": str(catalog_parent / "catalog"),
    }
    try:
        demo = subprocess.run(
            ["make", "--no-print-directory", "-o", "setup", "demo"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert demo.returncode == 0, (demo.stdout + demo.stderr)[-4000:]
        assert "Device" in demo.stdout and "total_recordings" in demo.stdout and "(5 rows)" in demo.stdout, demo.stdout

        answer = sql(COUNTS, env, output="csv")
        counts = [{k: int(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(answer))]
        assert counts == [
            {
                "gold": rows_rs(lake / "gold" / "device_counts"),
                "silver": rows_rs(lake / "silver" / "activity"),
                "quarantined": rows_rs(lake / "bronze" / "activity_quarantine"),
                "events": rows_rs(lake / "_system" / "event_log"),
                "run_rows": 4,
                "runs": 1,
            }
        ]
        assert counts[0]["quarantined"] > 0 and counts[0]["silver"] > counts[0]["gold"] > 0
    finally:
        millpond("catalog", "stop", "--force", env=env)
        shutil.rmtree(catalog_parent, ignore_errors=True)
