"""The project folder reaches the Python workers of a JVM this process starts, and nothing else."""

from __future__ import annotations

import os

import pytest

from millpond.driver.session import project_on_workers_path

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("before", [None, "/opt/elsewhere"])
def test_the_project_is_on_pythonpath_only_while_the_jvm_starts(tmp_path, monkeypatch, before):
    """A leaked PYTHONPATH put the repository on the path of every process a test started later (Airflow then found
    the millpond plugin twice: once installed, once from the checkout's egg-info)."""
    (tmp_path / "pipelines").mkdir()
    monkeypatch.setenv("MILLPOND_PROJECT", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    if before is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", before)
    with project_on_workers_path():
        inside = os.environ["PYTHONPATH"].split(os.pathsep)
    assert inside[-1] == str(tmp_path) and inside[:-1] == ([before] if before else [])
    assert os.environ.get("PYTHONPATH") == before
