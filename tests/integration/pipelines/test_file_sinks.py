"""File sinks (`sink: {format: parquet|json|csv}`) on real Spark, against a plain-Python reference of the landed lines.

A small pipeline: landing json -> bronze (Delta, with quarantine) -> three file-sink tables reading bronze: a
parquet copy, a filtered json table and an append-mode windowed count in csv. Each sink is read back through its
`_spark_metadata` log (`spark.read.parquet(path)` and friends), which is what makes Spark's file sink exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from millpond import cli
from millpond.driver import runner
from millpond.lake import checkpoints, file_sink_log, paths
from millpond.runs import run_summary
from millpond.spec import Sink, load_pipeline
from tests.support.file_sink_pipeline import SINKS, SPEC, T0, land, reference

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")


def read_sinks(spark) -> dict[str, list[tuple]]:
    """Each sink read back the way a user would: through its `_spark_metadata` log, so only committed files."""
    from pyspark.sql import functions as F

    def minutes(column: str):
        return ((F.unix_timestamp(column) - int(T0.timestamp())) / 60).cast("int")

    parquet = spark.read.parquet(str(paths.table_path("gold.events_parquet")))
    big = spark.read.schema("device STRING, value BIGINT").json(str(paths.table_path("gold.big_json")))
    counts = (
        spark.read.schema("window_start TIMESTAMP, device STRING, readings BIGINT")
        .option("header", "true")
        .csv(str(paths.table_path("gold.counts_csv")))
    )
    return {
        "gold.events_parquet": sorted(tuple(r) for r in parquet.select(minutes("ts"), "device", "value").collect()),
        "gold.big_json": sorted(tuple(r) for r in big.collect()),
        "gold.counts_csv": sorted(
            tuple(r) for r in counts.select(minutes("window_start"), "device", "readings").collect()
        ),
    }


def data_files(table_id: str) -> list[str]:
    """Every file in the sink's folder, its log included: a rerun that wrote anything changes this listing."""
    root = paths.table_path(table_id)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def summary(run_id: str) -> dict[str, dict]:
    return {t["table"]: t for t in run_summary.load("exports", run_id)["tables"]}


@pytest.fixture
def specs(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "exports.yaml").write_text(yaml.safe_dump(SPEC))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))
    return folder


def test_file_sinks_match_the_reference_run_by_run_and_an_idle_run_writes_no_file(spark, lake, specs, capsys):
    land(lake, 0)
    assert runner.main(["exports", "--run-id", "r0"]) == 0
    ref0 = reference(lake)
    assert read_sinks(spark) == ref0
    assert ref0["gold.counts_csv"] == [(0, "d1", 2), (0, "d2", 1)]  # [10, 20) is still open at watermark 19
    first = summary("r0")
    assert {t: first[t]["rows_written"] for t in SINKS} == {t: len(rows) for t, rows in ref0.items()}
    assert all(first[t]["outcome"] == "succeeded" and first[t]["version_after"] >= 0 for t in SINKS)

    listing = {t: data_files(t) for t in SINKS}
    assert runner.main(["exports", "--run-id", "idle"]) == 0
    assert {t: data_files(t) for t in SINKS} == listing
    idle = summary("idle")
    assert {t: (idle[t]["input_unchanged"], idle[t]["rows_written"]) for t in SINKS} == {t: (True, 0) for t in SINKS}
    assert {t: idle[t]["version_after"] for t in SINKS} == {t: first[t]["version_after"] for t in SINKS}

    for round_number in (1, 2):
        land(lake, round_number)
        assert runner.main(["exports", "--run-id", f"r{round_number}"]) == 0
        before, ref = ref0, reference(lake)
        assert read_sinks(spark) == ref
        written = summary(f"r{round_number}")
        assert {t: written[t]["rows_written"] for t in SINKS} == {t: len(ref[t]) - len(before[t]) for t in SINKS}
        ref0 = ref

    capsys.readouterr()
    assert cli.main(["status", "exports", "--json"]) == 0
    status = {row["path"]: row for row in json.loads(capsys.readouterr().out)}
    for table_id in SINKS:
        row = status[str(paths.table_path(table_id))]
        assert row["rows"] == len(ref0[table_id]) and row["last_run"] == "succeeded"
        assert row["version"] == file_sink_log.latest_batch(paths.table_path(table_id)) >= 0


def run_killed_at(lake: Path, specs: Path, fault: str) -> None:
    env = {**os.environ, "MILLPOND_LAKE": str(lake), "MILLPOND_PIPELINES": str(specs), "MILLPOND_FAULT": fault}
    proc = subprocess.run(
        [MILLPOND, "run", "exports"], env=env, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_sigkill_after_a_file_sink_query_then_a_rerun_writes_nothing_twice(spark, lake, specs):
    """Killed once the sink's batches are committed but before millpond recorded the run: the rerun starts the
    query (no run record says nothing is new), Spark finds every offset committed, and no file is added."""
    land(lake, 0)
    run_killed_at(lake, specs, "gold.events_parquet:after_query")
    killed = data_files("gold.events_parquet")
    assert any(name.endswith(".parquet") for name in killed)
    assert runner.main(["exports", "--run-id", "rerun-0"]) == 0
    assert data_files("gold.events_parquet") == killed
    rerun = summary("rerun-0")
    assert not rerun["gold.events_parquet"]["input_unchanged"] and rerun["gold.events_parquet"]["rows_written"] == 0
    assert read_sinks(spark) == reference(lake)

    land(lake, 1)
    run_killed_at(lake, specs, "gold.big_json:after_query")  # bronze and the parquet sink finished normally
    assert runner.main(["exports", "--run-id", "rerun-1"]) == 0
    assert read_sinks(spark) == reference(lake)


def test_a_batch_replayed_after_the_sink_committed_it_is_skipped_by_the_sink_log(spark, lake, specs):
    """The crash window inside a batch: the sink logged batch N, the checkpoint's commit log did not. The state
    such a crash leaves is made by hand (drop commits/N), then the rerun replays N and the sink skips it."""
    land(lake, 0)
    assert runner.main(["exports", "--run-id", "first"]) == 0
    checkpoint = paths.checkpoint_path("exports", "gold.events_parquet")
    newest = max((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert file_sink_log.latest_batch(paths.table_path("gold.events_parquet")) == int(newest.name)
    newest.unlink()  # offsets/N and _spark_metadata/N stay: exactly a SIGKILL between the two commits
    (newest.parent / f".{newest.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the commit file
    listing = data_files("gold.events_parquet")
    assert runner.main(["exports", "--run-id", "replay"]) == 0
    assert (checkpoint / "commits" / newest.name).exists()  # the batch ran again and was committed
    assert data_files("gold.events_parquet") == listing  # ... without a file: the sink's log already held it
    assert summary("replay")["gold.events_parquet"]["rows_written"] == 0
    assert read_sinks(spark) == reference(lake)


def test_checkpoint_rules_hold_for_a_file_sink_and_a_full_refresh_rebuilds_it(spark, lake, specs):
    """The sink's own log is data: a lost checkpoint is refused, and a full refresh drops the log with the files
    (a new checkpoint restarts at batch 0, which an old log would skip: the rebuilt sink would be empty)."""
    land(lake, 0)
    assert runner.main(["exports", "--run-id", "first"]) == 0
    pipeline = load_pipeline("exports")
    table = pipeline.tables["gold.events_parquet"]
    with pytest.raises(checkpoints.CheckpointProblem, match='sink: "parquet" -> "json"'):
        checkpoints.verify(pipeline, replace(table, sink=Sink("json")))
    checkpoint = paths.checkpoint_path("exports", table.id)
    moved = checkpoint.with_name("moved")
    checkpoint.rename(moved)
    with pytest.raises(checkpoints.CheckpointProblem, match="missing .* but the table has data"):
        checkpoints.verify(pipeline, table)
    moved.rename(checkpoint)
    land(lake, 1)
    assert runner.main(["exports", "--full-refresh", "gold.events_parquet", "--run-id", "refresh"]) == 0
    assert file_sink_log.latest_batch(paths.table_path(table.id)) == 0  # one batch of a new checkpoint
    assert summary("refresh")["gold.events_parquet"]["rows_written"] == len(reference(lake)["gold.events_parquet"])
    assert read_sinks(spark) == reference(lake)
