"""Backfills that reprocess, through the REST API of the real Airflow `make up` starts (isolated home, lake, ports).

One hour re-delivered with corrected content under the same names; a backfill of that hour with default settings
rebuilds it in every table (each then equal to the plain-Python reference over the landing files as they are now);
a later round is ingested exactly once; a daily backfill of the hourly pipeline (`activity__reprocess`) rebuilds a
whole day in one run; a manual run with a logical date and `{"reprocess": true}` rebuilds its interval;
`{"reprocess": false}` keeps a backfill to draining what is new.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from millpond.dev.sample_data import SECONDS_PER_FILE, activity_files
from millpond.runs import run_summary
from tests.integration.airflow.test_airflow_up import make, stack  # noqa: F401 - `stack` is the fixture used here
from tests.integration.airflow.test_make_up_runs import (
    DONE,
    client,
    create_backfill,
    finished,
    state_of,
    task_states,
)
from tests.support.airflow_run import wait_for
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference

pytestmark = [pytest.mark.integration, pytest.mark.long]

FILES_PER_HOUR = 3600 // SECONDS_PER_FILE
DAY = datetime(2026, 11, 1, tzinfo=UTC)


def land_hour(landing, hour: int, seed: int) -> None:
    activity_files(
        landing, FILES_PER_HOUR, 20, duplicates=0.05, malformed=0.03, seed=seed, start_index=hour * FILES_PER_HOUR
    )


def backfill(api, dag_id: str, logical: datetime, conf: dict) -> object:
    """One backfill run for the interval starting at `logical`, waited for."""
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.backfill_post_body import BackfillPostBody

    create_backfill(api, BackfillPostBody(dag_id=dag_id, from_date=logical, to_date=logical, dag_run_conf=conf))

    def run():
        runs = [r for r in DagRunApi(api).get_dag_runs(dag_id).dag_runs if str(r.run_type.value) == "backfill"]
        mine = [r for r in runs if r.logical_date == logical]
        return mine[0] if mine and state_of(mine[0]) in DONE else None

    done = wait_for(run, timeout=600, interval=3)
    assert done, f"the backfill of {dag_id} at {logical} did not finish"
    assert state_of(done) == "success", task_states(api, dag_id, done.dag_run_id)
    return done


def reprocessed(lake, dag_id: str, run_id: str) -> dict[str, tuple]:
    summary = run_summary.load(*run_summary.dag_run_key(dag_id, run_id), root=lake)
    assert summary and len(summary["tables"]) == 4, summary
    return {t["table"]: (t["reprocess_start"], t["reprocess_end"], t["rows_replaced"]) for t in summary["tables"]}


def test_backfills_through_the_rest_api_reprocess_their_interval(stack, spark, monkeypatch):  # noqa: F811
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody

    env, home, lake, port = stack["env"], stack["home"], stack["lake"], stack["port"]
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))  # this process reads the tables back
    landing = lake / "landing" / "activity"
    for hour in (0, 1, 2, 25, 26):  # the day, and the next day's early hours: silver's watermark passes the day
        land_hour(landing, hour, seed=hour)
    up = make("up", env, timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr
    api = client(f"http://127.0.0.1:{port}", home)
    runs_api = DagRunApi(api)

    first = runs_api.trigger_dag_run("activity", TriggerDAGRunPostBody(logical_date=None))
    assert state_of(finished(api, "activity", first.dag_run_id, timeout=600)) == "success"
    assert_matches_reference(spark, activity_reference(landing))

    # Hour 1 corrected under the same names; a backfill of it with default settings reprocesses it.
    land_hour(landing, 1, seed=101)
    run = backfill(api, "activity", DAY.replace(hour=1), conf={})
    assert_matches_reference(spark, activity_reference(landing))
    hour_1 = ("2026-11-01T01:00:00+00:00", "2026-11-01T02:00:00+00:00")
    replaced = reprocessed(lake, "activity", run.dag_run_id)
    assert {t: v[:2] for t, v in replaced.items()} == {t: hour_1 for t in replaced}
    assert replaced["bronze.activity"][2] > 0 and replaced["silver.activity"][2] > 0

    # A later round: ingested exactly once by a plain run.
    land_hour(landing, 27, seed=27)
    later = runs_api.trigger_dag_run("activity", TriggerDAGRunPostBody(logical_date=None))
    assert state_of(finished(api, "activity", later.dag_run_id, timeout=600)) == "success"
    summary = run_summary.load("activity", later.dag_run_id, root=lake)
    assert next(t for t in summary["tables"] if t["table"] == "bronze.activity")["rows_in"] == FILES_PER_HOUR * 20
    assert_matches_reference(spark, activity_reference(landing))

    # A daily backfill of the hourly pipeline: one run rebuilds the whole day.
    land_hour(landing, 2, seed=102)
    run = backfill(api, "activity__reprocess", DAY, conf={})
    assert_matches_reference(spark, activity_reference(landing))
    day = ("2026-11-01T00:00:00+00:00", "2026-11-02T00:00:00+00:00")
    assert {t: v[:2] for t, v in reprocessed(lake, "activity__reprocess", run.dag_run_id).items()} == {
        t: day for t in replaced
    }

    # A manual run with a logical date and {"reprocess": true} reprocesses its interval too: the hour that ends at
    # its logical date (the timetable's manual interval).
    land_hour(landing, 2, seed=103)
    body = TriggerDAGRunPostBody(logical_date=DAY.replace(hour=3), conf={"reprocess": True})
    manual = runs_api.trigger_dag_run("activity", body)
    run = finished(api, "activity", manual.dag_run_id, timeout=600)
    assert state_of(run) == "success", task_states(api, "activity", manual.dag_run_id)
    assert_matches_reference(spark, activity_reference(landing))
    interval = (run.data_interval_start.isoformat(), run.data_interval_end.isoformat())
    assert {v[:2] for v in reprocessed(lake, "activity", manual.dag_run_id).values()} == {interval}

    # {"reprocess": false}: the backfill only drains what is new (nothing here, so no Spark application).
    run = backfill(api, "activity", DAY.replace(hour=2), conf={"reprocess": False})
    assert all(v == (None, None, None) for v in reprocessed(lake, "activity", run.dag_run_id).values())
    make("down", env, timeout=90)
