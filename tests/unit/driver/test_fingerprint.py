"""What makes a run refuse an engine as stale (millpond.driver.connect_server): the code every run shares, and only
those project packages its own pipeline's transforms come from."""

from __future__ import annotations

import shutil

import pytest

from millpond import settings
from millpond.driver.connect_server import code_fingerprint, stale_transforms
from millpond.spec import load_pipeline
from tests.support import REPO

pytestmark = pytest.mark.unit


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the example project (specs and the transforms package), as the engine would have seen it."""
    for folder in ("pipelines", "expectations"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    shutil.copytree(REPO / "spark_jobs", tmp_path / "spark_jobs", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("MILLPOND_JARS", str(settings.jars_dir()))  # the checkout's, before the project moves
    monkeypatch.setenv("MILLPOND_PROJECT", str(tmp_path))
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    return tmp_path


def test_a_changed_transform_refuses_only_the_runs_that_import_it(project):
    whole, engine_parts = code_fingerprint()  # what `millpond engine start` records
    assert "transforms:spark_jobs" in engine_parts  # device_status's functions live there
    device_status, activity = load_pipeline("device_status"), load_pipeline("activity")
    assert stale_transforms(engine_parts, code_fingerprint(device_status)[1]) == []

    sessions = project / "spark_jobs" / "transforms" / "sessions.py"
    sessions.write_text(sessions.read_text() + "\n# a change after the engine started\n")
    run_whole, run_parts = code_fingerprint(device_status)
    assert run_whole == whole  # millpond, jars and packages are the same code
    assert stale_transforms(engine_parts, run_parts) == ["transforms:spark_jobs"]
    assert stale_transforms(engine_parts, code_fingerprint(activity)[1]) == []  # imports no transform


def test_specs_from_another_folder_share_the_engine(project, tmp_path_factory, monkeypatch):
    _, engine_parts = code_fingerprint()
    elsewhere = tmp_path_factory.mktemp("other-specs")
    shutil.copy(project / "pipelines" / "activity.yaml", elsewhere / "activity.yaml")
    monkeypatch.setenv("MILLPOND_PIPELINES", str(elsewhere))
    assert code_fingerprint()[0] == code_fingerprint(load_pipeline("activity"))[0]
    assert stale_transforms(engine_parts, code_fingerprint(load_pipeline("activity"))[1]) == []
