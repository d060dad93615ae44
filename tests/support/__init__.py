"""Helpers both the unit and the integration tests import: plain-Python references, table readers, Airflow runs."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
