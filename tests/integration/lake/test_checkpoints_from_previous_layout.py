"""A lake whose checkpoints were made by the layout before the restructure (platform code under `spark_jobs/` and
flat `millpond/` modules) keeps running exactly once under the installed package.

What could break: a checkpoint that remembers code by module path. A stateful table's spec names its function by
module path (`spark_jobs.transforms.sessions:sessions`), and its state lives in the checkpoint. The example
project's transforms kept their module path, and Spark's checkpoint stores the state's schema, not the function, so
no alias is needed; this test proves it with a checkpoint the previous code really wrote: the previous commit's code
(from git) runs the first rounds, today's code the rest, and every round is compared with the plain-Python
sessions reference.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from millpond import settings
from millpond.driver import runner
from tests.integration.pipelines.test_stateful import ROUNDS, land, read_latest, read_sessions, reference, write_spec
from tests.support import REPO
from tests.support.airflow_run import CONNECT_VARIABLES

pytestmark = pytest.mark.integration


PREVIOUS_LAYOUT = "4efcaf0"  # the last commit before millpond became one package arranged by role


def previous_code(target: Path) -> Path:
    """The previous layout's millpond/ and spark_jobs/, from this repository's history."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", PREVIOUS_LAYOUT, "millpond", "spark_jobs"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, (
        f"commit {PREVIOUS_LAYOUT} is not in this clone ({archive.stderr.decode().strip()}). Fix: clone with full "
        "history (git clone without --depth, or git fetch --unshallow)"
    )
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    assert (target / "spark_jobs" / "runner.py").is_file() and (target / "millpond" / "spec.py").is_file()
    return target


def test_stateful_checkpoints_made_by_the_previous_layout_resume_exactly_once(tmp_path, spark, monkeypatch):
    old = previous_code(tmp_path / "previous")
    lake, specs = tmp_path / "lake", tmp_path / "pipelines"
    lake.mkdir()
    write_spec(specs)
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    old_env = {  # the previous layout's code runs in a JVM of its own (`make test-engine`'s engine runs today's)
        **{k: v for k, v in os.environ.items() if k not in CONNECT_VARIABLES},
        "PYTHONPATH": str(old),
        "PYSPARK_PYTHON": sys.executable,
        "MILLPOND_JARS": str(settings.jars_dir()),
        "MILLPOND_EXPECTATIONS": str(settings.expectations_dir()),
    }
    handover = 2
    for round_number in range(len(ROUNDS)):
        land(lake, round_number)
        if round_number < handover:
            done = subprocess.run(
                [sys.executable, "-m", "millpond.cli", "run", "visits", "--run-id", f"old-{round_number}"],
                cwd=old,
                env=old_env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert str(old / "spark_jobs" / "runner.py") not in done.stderr  # (no traceback from the old runner)
        else:
            assert runner.main(["visits", "--run-id", f"new-{round_number}"]) == 0
        expected = reference(ROUNDS[: round_number + 1])
        assert sorted(read_sessions(spark)) == sorted(expected.emitted[-1]), f"gold.sessions after round {round_number}"
        assert read_latest(spark) == expected.latest(), f"gold.device_latest after round {round_number}"
