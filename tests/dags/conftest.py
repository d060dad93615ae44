"""Airflow for the DAG tests: its own home per session (SQLite), no examples, our dags/ folder, local Spark.

Set before anything imports airflow: Airflow reads its configuration once, at import.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="millpond-airflow-"))
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ.setdefault("AIRFLOW_CONN_SPARK_MILLPOND", '{"conn_type": "spark", "host": "local[2]"}')
