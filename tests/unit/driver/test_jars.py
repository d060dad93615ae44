"""The jars every Spark application ships, checked before a JVM starts (the functions themselves:
tests/integration/speedups/test_json_functions.py)."""

from __future__ import annotations

import pytest

from millpond.driver import jars

pytestmark = pytest.mark.unit


def test_a_jar_folder_without_the_functions_jar_is_refused_naming_the_fix(tmp_path, monkeypatch):
    (tmp_path / "delta-spark_4.2_2.13-4.4.0.jar").write_bytes(b"")
    monkeypatch.setenv("MILLPOND_JARS", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"millpond-spark.jar .* Fix: run `make jvm`"):
        jars.spark_jars()
