"""Damaged checkpoints and incompatible spec changes: a clear error with the recovery command, never a re-ingest.

One real run builds a lake; each test damages a copy of it the way a user or a failing disk would.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import checkpoints, paths
from millpond.lake.delta_log import latest_version
from millpond.spec import load_pipeline
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")


@pytest.fixture(scope="module")
def built_lake(tmp_path_factory, spark):
    """(lake, pristine copy). The file source logs absolute paths, so each test restores the copy in place."""
    base = tmp_path_factory.mktemp("built")
    root = base / "lake"
    root.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MILLPOND_LAKE", str(root))
        activity_files(root / "landing" / "activity", 2, 300, duplicates=0.05, seed=11)
        assert runner.main(["activity", "--run-id", "built"]) == 0
        activity_files(root / "landing" / "activity", 1, 300, duplicates=0.05, seed=12)
        assert runner.main(["activity", "--run-id", "built-2"]) == 0
    shutil.copytree(root, base / "pristine")
    return root, base / "pristine"


@pytest.fixture
def lake(built_lake, monkeypatch) -> Path:
    root, pristine = built_lake
    shutil.rmtree(root)
    shutil.copytree(pristine, root)
    monkeypatch.setenv("MILLPOND_LAKE", str(root))
    return root


def checkpoint(table_id: str) -> Path:
    return paths.checkpoint_path("activity", table_id)


def versions() -> dict[str, int]:
    return {t: latest_version(paths.table_path(t)) for t in TABLES}


def newest(folder: Path) -> Path:
    return max((p for p in folder.iterdir() if p.name.split(".")[0].isdigit()), key=lambda p: int(p.name.split(".")[0]))


def run_refused(lake: Path, capsys, table_id: str) -> str:
    """Land new data, run: the damaged table fails naming itself, writes nothing, and tells the fix."""
    activity_files(lake / "landing" / "activity", 1, 300, seed=99)
    before = versions()
    assert runner.main(["activity", "--run-id", "damaged"]) == 1
    err = capsys.readouterr().err
    assert f"table {table_id} failed" in err
    assert f"millpond run activity --full-refresh {table_id}" in err
    damaged_and_after = list(TABLES)[list(TABLES).index(table_id) :]
    assert {t: v for t, v in versions().items() if t in damaged_and_after} == {
        t: v for t, v in before.items() if t in damaged_and_after
    }, "a refused table (or one downstream of it) was written"
    return err


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda c: newest(c / "offsets").write_text('v1\n{"batchWatermarkMs":0,"batchTi'), "is corrupted"),
        (lambda c: newest(c / "offsets").write_bytes(b"\x00\x00\x00"), "is corrupted"),
        (lambda c: (c / "metadata").write_text("not json\n"), "metadata is unreadable"),
        (lambda c: shutil.rmtree(c / "sources"), "seen-files log"),
        (lambda c: shutil.rmtree(c / "offsets"), "is missing (no offsets) but the table has data"),
    ],
    ids=["truncated-offsets", "garbage-offsets", "bad-metadata", "lost-seen-files-log", "lost-offsets"],
)
def test_damaged_bronze_checkpoint_is_refused_with_the_fix(lake, damage, expected):
    damage(checkpoint("bronze.activity"))
    pipeline = load_pipeline("activity")
    with pytest.raises(checkpoints.CheckpointProblem) as refused:
        checkpoints.verify(pipeline, pipeline.tables["bronze.activity"])
    assert expected in str(refused.value)
    assert str(checkpoint("bronze.activity")) in str(refused.value)
    assert "millpond run activity --full-refresh bronze.activity" in str(refused.value)


def test_lost_state_of_a_stateful_table_is_refused(lake):
    shutil.rmtree(checkpoint("silver.activity") / "state")
    pipeline = load_pipeline("activity")
    with pytest.raises(checkpoints.CheckpointProblem, match="state folder .* is missing: the keys already seen"):
        checkpoints.verify(pipeline, pipeline.tables["silver.activity"])


def test_a_run_on_a_damaged_checkpoint_fails_writes_nothing_and_the_fix_rebuilds_exactly(lake, spark, capsys):
    shutil.rmtree(checkpoint("bronze.activity") / "sources")
    assert "seen-files log" in run_refused(lake, capsys, "bronze.activity")
    assert runner.main(["activity", "--full-refresh", "bronze.activity"]) == 0
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))


def test_incompatible_spec_change_is_named_and_points_to_full_refresh(lake):
    pipeline = load_pipeline("activity")
    silver = pipeline.tables["silver.activity"]
    changed = dataclasses.replace(silver, dedup_keys=("Device", "Recorded_At"))
    with pytest.raises(checkpoints.CheckpointProblem) as refused:
        checkpoints.verify(pipeline, changed)
    message = str(refused.value)
    assert 'dedup_keys: ["Device", "Index", "Recorded_At"] -> ["Device", "Recorded_At"]' in message
    assert "--full-refresh silver.activity" in message

    gold = pipeline.tables["gold.activity_hourly"]
    window = dataclasses.replace(gold.aggregate.window, duration="30 minutes")
    regrouped = dataclasses.replace(gold, aggregate=dataclasses.replace(gold.aggregate, window=window))
    with pytest.raises(checkpoints.CheckpointProblem, match=r'aggregate: .*"1 hour".* -> .*"30 minutes"'):
        checkpoints.verify(pipeline, regrouped)


def test_a_stateless_transform_change_is_allowed(lake):
    pipeline = load_pipeline("activity")
    silver = pipeline.tables["silver.activity"]
    stricter = dataclasses.replace(
        silver, transform=dataclasses.replace(silver.transform, sql=silver.transform.sql + " AND gt IS NOT NULL")
    )
    checkpoints.verify(pipeline, stricter)  # Spark accepts stateless changes: no refusal


def test_spark_state_errors_get_the_recovery_hint_and_other_errors_do_not():
    pipeline = load_pipeline("activity")
    silver = pipeline.tables["silver.activity"]
    state_error = "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key schema"
    assert "--full-refresh silver.activity" in checkpoints.spark_error_fix(pipeline, silver, state_error)
    assert checkpoints.spark_error_fix(pipeline, silver, "[DIVIDE_BY_ZERO] Division by zero") is None


def test_a_table_is_skipped_only_when_its_source_is_unchanged_and_every_batch_committed(lake):
    pipeline = load_pipeline("activity")

    def skipped(table_id: str) -> bool:
        table = pipeline.tables[table_id]
        return checkpoints.nothing_new(pipeline, table, checkpoints.input_fingerprint(pipeline, table)) is not None

    assert [t for t in TABLES if skipped(t)] == list(TABLES)  # the built lake's last run finished
    offsets = newest(checkpoint("silver.activity") / "offsets")
    shutil.copy(offsets, offsets.with_name(str(int(offsets.name) + 1)))  # offsets logged, commit not: replay due
    assert not skipped("silver.activity")
    activity_files(lake / "landing" / "activity", 1, 10, seed=5)
    assert not skipped("bronze.activity")
    assert skipped("gold.device_counts")  # its source, silver's Delta version, did not change
    bronze = pipeline.tables["bronze.activity"]
    landed = checkpoints.input_fingerprint(pipeline, bronze)
    (lake / "landing" / "activity" / ".activity-000099.json.tmp").write_text("{}\n")  # hidden: Spark skips it too
    assert checkpoints.input_fingerprint(pipeline, bronze) == landed
    (checkpoint("gold.device_counts") / checkpoints.INPUT_FILE).unlink()  # no record of a finished run
    assert not skipped("gold.device_counts")
