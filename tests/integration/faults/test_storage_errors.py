"""The lake's disk fills up, or a table folder is not writable: a clear error, readers see the last good version,
and the run after the fix writes every row exactly once (compared with the plain-Python reference).

Real faults: a size-capped tmpfs mounted as the lake (needs root: CI runs as root), and a run that may not write
a table folder (as root: the folder belongs to another user and the run lacks CAP_DAC_OVERRIDE; else chmod).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from tests.support.lake_tables import assert_matches_reference, read
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")
NOBODY = 65534
IS_ROOT = os.geteuid() == 0


def versions() -> dict[str, int]:
    return {t: latest_version(paths.table_path(t)) for t in TABLES}


def snapshot(spark) -> dict[str, list]:
    return {t: sorted(map(tuple, read(spark, t).drop("_ingested_at").collect()), key=repr) for t in TABLES}


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    if not IS_ROOT:
        pytest.skip("mounting a size-capped tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], check=True)
    lake = mount / "lake"
    lake.mkdir()
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    yield lake
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a filler file until the device reports ENOSPC; return it (delete it to free the space)."""
    filler = disk.parent / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)  # page-sized, so the last free page is taken too
        except OSError:
            pass
    return filler


def test_a_full_disk_fails_clearly_keeps_the_last_version_and_the_rerun_is_exact(small_disk, spark, capsys):
    landing = small_disk / "landing" / "activity"
    activity_files(landing, 2, 300, duplicates=0.05, seed=21)
    assert runner.main(["activity", "--run-id", "before-full"]) == 0
    before, tables_before = versions(), snapshot(spark)
    activity_files(landing, 2, 300, duplicates=0.05, seed=22)
    filler = fill(small_disk)

    assert runner.main(["activity", "--run-id", "disk-full"]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err
    assert f"storage error writing the lake {small_disk}" in err or "could not record the run" in err
    filler.unlink()
    assert versions() == before, "a table moved to a new version while the disk was full"
    assert snapshot(spark) == tables_before, "readers see something other than the last good version"

    assert runner.main(["activity", "--run-id", "after-free"]) == 0
    assert_matches_reference(spark, activity_reference(landing))


def run_without_override(lake: Path) -> subprocess.CompletedProcess:
    """`millpond run` whose file permissions are enforced: as root, without the capability to override them."""
    env = {**os.environ, "MILLPOND_LAKE": str(lake)}
    env.pop("MILLPOND_FAULT", None)
    millpond = str(Path(sys.executable).parent / "millpond")
    command = [millpond, "run", "activity", "--run-id", "denied"]
    if IS_ROOT:
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.own_jvm  # the run process's dropped capabilities: on an engine the server's workers write
def test_permission_denied_on_a_table_fails_clearly_and_the_rerun_after_the_fix_is_exact(lake, spark):
    landing = lake / "landing" / "activity"
    activity_files(landing, 2, 300, duplicates=0.05, seed=31)
    assert runner.main(["activity", "--run-id", "before-denied"]) == 0
    activity_files(landing, 1, 300, duplicates=0.05, seed=32)
    silver_log = paths.table_path("silver.activity") / "_delta_log"
    if IS_ROOT:
        os.chown(silver_log, NOBODY, NOBODY)  # another user's folder, read-only to everyone else
    os.chmod(silver_log, 0o555 if not IS_ROOT else 0o755)
    before, silver_before = versions(), snapshot(spark)["silver.activity"]

    denied = run_without_override(lake)
    assert denied.returncode == 1, denied.stdout[-2000:] + denied.stderr[-3000:]
    assert "table silver.activity failed" in denied.stderr
    assert "this user may not write there" in denied.stderr
    assert latest_version(paths.table_path("bronze.activity")) > before["bronze.activity"], "bronze should commit"
    assert {t: v for t, v in versions().items() if t != "bronze.activity"} == {
        t: v for t, v in before.items() if t != "bronze.activity"
    }
    assert snapshot(spark)["silver.activity"] == silver_before

    os.chown(silver_log, os.geteuid(), os.getegid())
    os.chmod(silver_log, 0o755)
    assert runner.main(["activity", "--run-id", "after-fix"]) == 0
    assert_matches_reference(spark, activity_reference(landing))
