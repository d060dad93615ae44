"""The runner on real Spark + Delta: incremental, exact against a plain-Python reference, rerunnable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import pytest

from millpond import settings
from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.driver.streaming import checkpoint_query_id
from millpond.lake import paths
from millpond.lake.delta_log import latest_version, table_state
from millpond.runs import run_summary
from millpond.spec import load_pipeline
from tests.support import REPO
from tests.support.lake_tables import assert_matches_reference, data_commits_without_txn, read
from tests.support.lineage import assert_lineage_of_a_first_run, events_in, file_transport
from tests.support.reference import activity_reference

pytestmark = pytest.mark.integration


def land(lake, files, rows=400, **kw):
    return activity_files(lake / "landing" / "activity", files, rows, **kw)


def versions() -> dict[str, int]:
    return {
        t: (table_state(paths.table_path(t)) or table_state(paths.quarantine_path(t))).version
        for t in ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")
    }


def freshness(at: datetime) -> dict[str, dict]:
    """`millpond freshness activity --json --at <at>` in a process of its own, by table."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "millpond"), "freshness", "activity", "--json", "--at", at.isoformat()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a table is stale
    found = {f["table"]: f for f in json.loads(done.stdout)}
    assert (done.returncode == 1) == any(f["status"] == "stale" for f in found.values())
    return found


def event_log(spark, run_id=None):
    df = spark.read.format("delta").load(str(paths.event_log_path()))
    return {r.table: r for r in (df.where(df.run_id == run_id) if run_id else df).collect()}


def test_three_rounds_match_reference_and_each_run_reads_only_new_files(spark, lake, backend, monkeypatch, tmp_path):
    """The spine, on both backends (a JVM of the run's own, the engine). The first run also sends its OpenLineage
    events to a file through openlineage-python's own transport: the same graph on both backends, the spec's."""
    sent = tmp_path / "lineage.jsonl"
    for round_number in range(3):
        land(lake, 2, duplicates=0.05, malformed=0.01, seed=round_number)
        with monkeypatch.context() as scoped:
            for name, value in file_transport(sent).items() if round_number == 0 else ():
                scoped.setenv(name, value)
            code, out, err = backend.run("--run-id", f"round-{round_number}")
        assert code == 0, (out + err)[-4000:]
        backend.assert_ran_here(out)
        if round_number == 0:
            assert_lineage_of_a_first_run(events_in(sent), load_pipeline("activity"), lake)
        bronze = event_log(spark, f"round-{round_number}")["bronze.activity"]
        assert bronze.rows_in == 800  # exactly the two files landed since the previous run
        assert bronze.outcome == "succeeded"
        # Silver's second batch only advances its watermark: it runs, but commits no empty Delta version.
        silver = event_log(spark, f"round-{round_number}")["silver.activity"]
        assert (silver.micro_batches, silver.version_after - silver.version_before) == (2, 1)
        assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))
    # What the batches counted and the gate found reached the run summary (on the engine: from the server's worker).
    summary = {t["table"]: t for t in run_summary.load("activity", "round-2")["tables"]}
    assert summary["bronze.activity"]["micro_batches"] >= 1 and summary["bronze.activity"]["rows_in"] == 800
    assert summary["silver.activity"]["gate"]["outcome"] == "passed"
    engine_runs = lake / "_system" / "engine_runs"  # the server-side batches' reports, removed with the session
    assert not engine_runs.exists() or not any(engine_runs.iterdir())
    files = read(spark, "bronze.activity").select("_source_file").distinct().collect()
    sources = {r._source_file.rsplit("/", 1)[-1] for r in files}
    assert sources == {f"activity-{k:06d}.json" for k in range(6)}
    # Each append carries Delta's `txn` action: its checkpoint's query id and batch.
    app_id = f"millpond:{checkpoint_query_id(paths.checkpoint_path('activity', 'bronze.activity'))}"
    log = paths.table_path("bronze.activity") / "_delta_log"
    newest = (log / f"{latest_version(paths.table_path('bronze.activity')):020d}.json").read_text().splitlines()
    txn = [json.loads(line)["txn"] for line in newest if '"txn"' in line]
    assert [(t["appId"], t["version"]) for t in txn] == [(app_id, 2)]  # the third run's one batch
    assert data_commits_without_txn(lake) == []
    code, out, err = backend.run("--run-id", "idle")
    assert code == 0 and "no Spark application started" in out, (out + err)[-3000:]


def test_a_run_with_nothing_new_writes_nothing_and_the_gold_tables_age_from_the_run_that_wrote(spark, lake):
    """`millpond freshness` (no JVM) counts a table's age from its last commit that changed data: neither the idle run
    nor an OPTIMIZE makes the gold tables (`freshness: 2h` in activity.yaml) any younger."""
    land(lake, 2, duplicates=0.05)
    assert runner.main(["activity", "--run-id", "first"]) == 0
    ended = datetime.fromisoformat(run_summary.load("activity", "first")["updated_at"])  # after its last commit
    before = versions()
    assert runner.main(["activity", "--run-id", "second"]) == 0
    assert versions() == before
    log = event_log(spark, "second")
    assert {t: (r.rows_in, r.rows_written, r.version_before, r.version_after) for t, r in log.items()} == {
        t: (0, 0, v, v) for t, v in before.items()
    }
    spark.sql(f"OPTIMIZE delta.`{paths.table_path('gold.activity_hourly')}`")
    spark.sql(f"ALTER TABLE delta.`{paths.table_path('gold.device_counts')}` SET TBLPROPERTIES ('team' = 'data')")
    gold = ("gold.device_counts", "gold.activity_hourly")
    at_the_end = freshness(ended)
    assert {t: f["status"] for t, f in at_the_end.items()} == {t: "fresh" for t in gold}
    assert all(datetime.fromisoformat(f["since"]) <= ended for f in at_the_end.values()), at_the_end  # the first run
    assert {t: f["status"] for t, f in freshness(ended + timedelta(hours=3)).items()} == {t: "stale" for t in gold}


def test_tables_whose_source_did_not_change_start_no_query_and_new_files_are_read_next_run(spark, lake):
    land(lake, 2, duplicates=0.05)
    assert runner.main(["activity", "--run-id", "first"]) == 0
    first = event_log(spark, "first")
    assert runner.main(["activity", "--run-id", "idle"]) == 0
    idle = {t["table"]: t for t in run_summary.load("activity", "idle")["tables"]}
    assert {t: (e["input_unchanged"], e["micro_batches"]) for t, e in idle.items()} == {t: (True, 0) for t in first}
    assert {t: e["state_rows"] for t, e in idle.items()} == {t: r.state_rows for t, r in first.items()}
    land(lake, 1, seed=9)
    before = versions()
    assert runner.main(["activity", "--run-id", "asked-without-spark"], spark_allowed=False) == runner.NEEDS_SPARK
    assert versions() == before and run_summary.load("activity", "asked-without-spark") is None
    assert runner.main(["activity", "--run-id", "next"]) == 0
    after = {t["table"]: t for t in run_summary.load("activity", "next")["tables"]}
    assert not [t for t, e in after.items() if e["input_unchanged"]]
    assert after["bronze.activity"]["rows_in"] == 400
    assert_matches_reference(spark, activity_reference(lake / "landing" / "activity"))


def test_a_run_with_nothing_new_needs_no_java_and_its_event_log_rows_read_back_in_spark(spark, lake):
    land(lake, 1)
    assert runner.main(["activity", "--run-id", "first"]) == 0
    no_java = {**os.environ, "JAVA_HOME": str(lake / "no-java"), "PATH": str(Path(sys.executable).parent)}
    idle = subprocess.run(
        [sys.executable, "-m", "millpond.driver.runner", "activity", "--run-id", "idle"],
        env=no_java,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert idle.returncode == 0, idle.stderr
    assert "no Spark application started" in idle.stdout
    log, first = event_log(spark, "idle"), event_log(spark, "first")
    assert set(log) == set(first)
    for table, row in log.items():
        assert (row.outcome, row.micro_batches, row.rows_written) == ("succeeded", 0, 0)
        assert row.version_before == row.version_after == first[table].version_after
        assert row.state_rows == first[table].state_rows and row.started_at <= row.ended_at


def test_event_log_records_each_table_with_airflow_context(spark, lake):
    land(lake, 1, duplicates=0.2, malformed=0.05, seed=7)
    argv = [
        "activity",
        "--run-id",
        "scheduled__2026-11-01T01:00:00+00:00",
        "--trigger",
        "scheduled",
        "--data-interval-start",
        "2026-11-01T01:00:00+00:00",
        "--data-interval-end",
        "2026-11-01T02:00:00+00:00",
    ]
    assert runner.main(argv) == 0
    log = event_log(spark, "scheduled__2026-11-01T01:00:00+00:00")
    reference = activity_reference(lake / "landing" / "activity")
    assert set(log) == {"bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly"}
    bronze, silver = log["bronze.activity"], log["silver.activity"]
    assert (bronze.rows_in, bronze.rows_written, bronze.rows_quarantined) == (
        reference.lines,
        len(reference.bronze),
        reference.quarantined,
    )
    assert silver.rows_written == len(reference.silver)
    assert log["gold.device_counts"].rows_written == len(reference.device_counts)
    assert bronze.trigger == "scheduled" and bronze.data_interval_start.hour == 1
    assert all(r.started_at <= r.ended_at for r in log.values())


def test_malformed_lines_land_in_quarantine_with_reasons_and_counts_reconcile(spark, lake):
    folder = lake / "landing" / "activity"
    land(lake, 1, rows=200, seed=3)
    good = '{"Recorded_At": "2026-11-01T00:00:01.000Z", "Device": "d1", "Index": 1, "x": 1.0, "y": 2.0, "z": 3.0}'
    bad = [
        '{"Recorded_At": "2026-11-01T00:00:01.000Z", "Device": "d1", "Index": "seven"}',
        "[1, 2]",
        '{"Device": "d1", "Index": 2',
        "plain text",
        '{"Device": "d2", "x": "fast"}',
    ]
    (folder / "hand-made.json").write_text("\n".join([good, "", "   ", *bad]) + "\n")
    assert runner.main(["activity"]) == 0
    reference = activity_reference(folder)
    assert_matches_reference(spark, reference)
    quarantine = spark.read.format("delta").load(str(paths.quarantine_path("bronze.activity")))
    reasons = {r.raw: r.reason for r in quarantine.collect()}
    assert reasons[bad[0]] == "field Index: expected bigint, got seven"
    assert reasons[bad[1]] == "not a JSON object"
    assert reasons[bad[2]].startswith("malformed JSON")
    assert reasons[bad[4]] == "field x: expected double, got fast"
    assert all(r.source_file.endswith("hand-made.json") for r in quarantine.collect())


def test_full_refresh_rebuilds_identical_tables_and_names_downstream(spark, lake, capsys):
    land(lake, 2, duplicates=0.05, malformed=0.01, seed=11)
    assert runner.main(["activity"]) == 0
    land(lake, 1, duplicates=0.05, seed=12)
    assert runner.main(["activity"]) == 0
    reference = activity_reference(lake / "landing" / "activity")
    capsys.readouterr()
    assert runner.main(["activity", "--full-refresh", "silver.activity"]) == 0
    out = capsys.readouterr().out
    assert "full refresh of silver.activity also rebuilds gold.device_counts, gold.activity_hourly" in out
    assert_matches_reference(spark, reference)
    assert runner.main(["activity", "--full-refresh", "bronze/activity"]) == 0  # the path spelling works too
    assert_matches_reference(spark, reference)
    assert table_state(paths.table_path("bronze.activity")).version == 0  # rebuilt, not appended again


def test_missing_checkpoint_is_refused_not_reingested(spark, lake, capsys):
    import shutil

    land(lake, 1, seed=5)
    assert runner.main(["activity"]) == 0
    rows = read(spark, "bronze.activity").count()
    shutil.rmtree(paths.checkpoint_path("activity", "bronze.activity"))
    assert runner.main(["activity"]) == 1
    err = capsys.readouterr().err
    assert "table bronze.activity failed" in err
    assert "millpond run activity --full-refresh bronze.activity" in err
    assert read(spark, "bronze.activity").count() == rows


def test_failed_table_names_itself_exits_nonzero_and_skips_downstream(spark, lake, capsys, monkeypatch, tmp_path):
    import yaml

    spec = yaml.safe_load(open(settings.pipelines_dir() / "activity.yaml"))
    spec["tables"]["silver.activity"]["transform"]["sql"] = "SELECT *, no_such_column FROM source"
    (tmp_path / "activity.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(tmp_path))
    land(lake, 1, seed=9)
    assert runner.main(["activity", "--run-id", "broken"]) == 1
    err = capsys.readouterr().err
    assert "table silver.activity failed" in err and "no_such_column" in err
    log = event_log(spark, "broken")
    assert log["bronze.activity"].outcome == "succeeded"
    assert log["silver.activity"].outcome == "failed" and "no_such_column" in log["silver.activity"].error
    assert log["gold.device_counts"].outcome == "skipped"


def test_tables_and_layers_select_what_runs(spark, lake):
    land(lake, 1, seed=21)
    assert runner.main(["activity", "--layers", "bronze,silver", "--run-id", "ingest"]) == 0
    assert set(event_log(spark, "ingest")) == {"bronze.activity", "silver.activity"}
    assert not paths.table_path("gold.device_counts").exists()
    assert runner.main(["activity", "--tables", "gold.device_counts", "--run-id", "one"]) == 0
    assert set(event_log(spark, "one")) == {"gold.device_counts"}
    assert runner.main(["activity", "--tables", "gold.nope"]) == 2


def spark_job_descriptions(spark, engine: str | None) -> list[str]:
    """Every job the Spark application ran, as the Spark UI's Jobs page describes it: from the status store of the
    tests' own JVM, or on the engine (`engine`, MILLPOND_TEST_ENGINE=on) from the engine's event log, which
    tests/conftest.py::test_engine has it write (its `spark.eventLog.dir`, read back through the Connect session)."""
    if not engine:
        jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
        described = (jobs.apply(i).description() for i in range(jobs.size()))
        return [d.get() for d in described if d.isDefined()]
    folder = spark.conf.get("spark.eventLog.dir", None)
    assert folder and spark.conf.get("spark.eventLog.enabled", None) == "true", "the engine writes no event log"
    logs = list(Path(urlparse(folder).path).glob(f"{spark.conf.get('spark.app.id')}*"))
    assert len(logs) == 1, f"the engine's event log in {folder}: {logs}"
    starts = (json.loads(line) for line in logs[0].read_text().splitlines() if '"SparkListenerJobStart"' in line)
    described = ((start.get("Properties") or {}).get("spark.job.description") for start in starts)
    return [d for d in described if d]


def test_a_batch_of_many_landing_files_is_listed_by_the_driver_not_by_a_spark_job(spark, lake, test_engine):
    # Spark lists more than 32 explicit paths (a file-stream batch's files) with a job of one task per path: about
    # 1 s of B3's cold 200-file batch. A local session, or a local engine, lists them on the driver.
    land(lake, 40, rows=20, seed=31)
    before = len(spark_job_descriptions(spark, test_engine))
    assert runner.main(["activity", "--layers", "bronze", "--run-id", "many-files"]) == 0
    jobs = spark_job_descriptions(spark, test_engine)
    assert len(jobs) > before  # the run's own jobs are among those read
    assert [d for d in jobs if "Listing leaf files" in d] == []
    assert event_log(spark, "many-files")["bronze.activity"].rows_in == 800
    assert read(spark, "bronze.activity").select("_source_file").distinct().count() == 40


def test_a_fresh_lake_is_a_successful_run_that_writes_nothing_and_says_why_without_a_jvm(lake, capsys):
    """Nothing landed yet (no folder, or an empty one): decided before any JVM, as the nothing-new check is."""
    from tests.integration.pipelines.test_joins import TABLES as CLICKS_TABLES

    (lake / "landing" / "clicks").mkdir(parents=True)  # an empty folder; landing/impressions does not exist at all
    assert runner.main(["clicks", "--run-id", "fresh"], spark_allowed=False) == 0  # not NEEDS_SPARK: no JVM
    out = capsys.readouterr().out
    assert "millpond: bronze.impressions: nothing has landed in landing/impressions yet" in out, out
    assert "millpond: bronze.clicks: nothing has landed in landing/clicks yet;" in out, out
    summary = run_summary.load("clicks", "fresh")
    why = {t["table"]: (t["outcome"], t["rows_written"], t["nothing_yet"]) for t in summary["tables"]}
    assert why == {
        "bronze.impressions": (
            "succeeded",
            0,
            f"nothing has landed in landing/impressions yet (no folder {lake / 'landing' / 'impressions'})",
        ),
        "bronze.clicks": ("succeeded", 0, "nothing has landed in landing/clicks yet"),
        "silver.impression_clicks": ("succeeded", 0, "bronze.impressions has no data yet"),
        "gold.ad_clicks": ("succeeded", 0, "silver.impression_clicks has no data yet"),
        "gold.campaign_ctr": ("succeeded", 0, "silver.impression_clicks has no data yet"),
    }, why
    assert set(why) == set(CLICKS_TABLES)
    assert not any((lake / layer).exists() for layer in ("bronze", "silver", "gold")), "a table was created"
    assert not (lake / "_checkpoints").exists(), "a checkpoint was started"


def test_a_table_whose_source_has_not_landed_waits_and_loses_nothing(spark, lake, capsys):
    """Clicks landed, impressions not yet: bronze.clicks is ingested, the join and gold wait (no PATH_NOT_FOUND);
    once impressions land, the next run joins everything, exactly as if both had landed together."""
    import shutil

    from tests.integration.pipelines.test_joins import ROUNDS, gold_reference, read_gold, read_joined, reference
    from tests.integration.pipelines.test_joins import land as land_clicks

    land_clicks(lake, 0)
    held_back = lake.parent / "impressions-later"
    shutil.move(lake / "landing" / "impressions", held_back)
    assert runner.main(["clicks", "--run-id", "clicks-only"]) == 0
    out = capsys.readouterr().out
    assert "nothing has landed in landing/impressions yet" in out, out
    outcomes = {
        t["table"]: (t["outcome"], t["rows_written"] > 0) for t in run_summary.load("clicks", "clicks-only")["tables"]
    }
    assert outcomes == {
        "bronze.impressions": ("succeeded", False),
        "bronze.clicks": ("succeeded", True),
        "silver.impression_clicks": ("succeeded", False),
        "gold.ad_clicks": ("succeeded", False),
        "gold.campaign_ctr": ("succeeded", False),
    }, outcomes

    shutil.move(held_back, lake / "landing" / "impressions")
    assert runner.main(["clicks", "--run-id", "both"]) == 0
    expected = reference(ROUNDS[:1])
    assert read_joined(spark) == expected
    assert read_gold(spark) == gold_reference(expected)
