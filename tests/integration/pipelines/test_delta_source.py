"""A Delta table another job writes (`sources: {crm: {format: delta}}`, read as `delta.crm`), applied through its
change data feed by an SCD 1 mirror and an SCD 2 history, on real Spark + Delta.

The other job is delta-rs (writes, MERGEs, DELETEs, its own change files), so what millpond reads is what another
writer committed; the reference is delta-rs's time travel of that table, not its feed. Cost: four in-process runs
on the test worker's session (the first stops before any query), about 60 s. Killed runs are not repeated here: the
feed is read by the same query as a pipeline table's (test_cdc.py kills those).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.backlog import pipeline_backlog
from millpond.lake.delta_log import change_feed_on, latest_version
from millpond.runs import run_summary
from millpond.spec import load_pipeline
from tests.support.cdc_reference import BY_COMMIT, BY_VERSION, CHANGE_FEED_SPEC, changes_between, fold_scd1, fold_scd2
from tests.support.cdc_reference import MIRROR as CDC_MIRROR

pytestmark = pytest.mark.integration

MIRROR, HISTORY = "silver.crm_mirror", "silver.crm_history"
SPEC = {
    "pipeline": "crm",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 2,
    "sources": {"crm": {"format": "delta", "path": "crm/customers"}},
    "tables": {
        # as test_cdc.py's readers of silver.customers' feed: a mirror (here with deletes of its own too, which
        # must not stop Delta's from deleting), and a history by commit on email
        MIRROR: {
            "from": "delta.crm",
            "cdc": {**CHANGE_FEED_SPEC["tables"][CDC_MIRROR]["cdc"], "apply_as_deletes": "email = 'gone@x'"},
        },
        HISTORY: {"from": "delta.crm", "cdc": CHANGE_FEED_SPEC["tables"][BY_COMMIT]["cdc"]},
    },
}


def customers(*rows: tuple[int, str, str]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "email": [r[1] for r in rows],
            "name": [r[2] for r in rows],
        }
    )


def states(location: str, first: int) -> list[tuple[int, dict]]:
    """The other job's table at each version from `first` (where the readers' streams started), by delta-rs."""
    found = []
    for version in range(first, latest_version(location) + 1):
        rows = DeltaTable(location, version=version).to_pyarrow_table().to_pylist()
        found.append((version, {r["id"]: {"email": r["email"], "name": r["name"]} for r in rows}))
    return found


def assert_the_readers_follow(spark, location: str, first: int) -> None:
    """The mirror holds the other table's rows now; the history, the versions its snapshots show since `first`."""

    def rows(table_id: str, columns: tuple[str, ...]) -> list[tuple]:
        read = spark.read.format("delta").load(str(paths.table_path(table_id)))
        return sorted((tuple(r) for r in read.select(*columns).collect()), key=repr)

    now = DeltaTable(location).to_pyarrow_table().to_pylist()
    assert rows(MIRROR, ("id", "email", "name")) == sorted((r["id"], r["email"], r["name"]) for r in now)
    events = changes_between(states(location, first))
    assert {k: {"email": v["email"], "name": v["name"]} for k, v in fold_scd1(events, BY_VERSION).items()} == {
        r["id"]: {"email": r["email"], "name": r["name"]} for r in now
    }
    expected = sorted(
        (
            (key, kept["email"], kept["name"], start, end)
            for key, kept, start, end in fold_scd2(events, BY_VERSION, ("email",))
        ),
        key=repr,
    )
    assert rows(HISTORY, ("id", "email", "name", "__START_AT", "__END_AT")) == expected, events


def test_another_job_s_delta_table_is_applied_through_its_change_feed_which_millpond_never_turns_on(
    spark, lake: Path, capsys
):
    """While the owner has the feed off, a run stops before reading, naming the ALTER its owner runs, and leaves the
    table alone. Once on, the readers take the table's rows, then each later MERGE, DELETE and append of delta-rs:
    the mirror equals the table, the history its versions (an update of an untracked column in place, a delete
    closing a version). The backlog counts the change files waiting, and nothing after the run. Then an UPDATE of a
    key column (its old row is a delete), and an overwrite (each row deleted and inserted again by Delta's feed:
    only what changed may show, and nothing is quarantined)."""
    spec = lake.parent / "crm.yaml"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    location = str(lake / "crm" / "customers")
    write_deltalake(location, customers((1, "a@x", "ann"), (2, "b@x", "bob"), (3, "c@x", "cy")))

    assert runner.main([str(spec)]) != 0
    said = capsys.readouterr()
    assert "delta.crm" in said.err + said.out and "SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')" in (
        said.err + said.out
    )
    assert latest_version(location) == 0 and not change_feed_on(location)  # never altered by millpond
    assert latest_version(paths.table_path(MIRROR)) < 0

    DeltaTable(location).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    first = latest_version(location)
    assert runner.main([str(spec)]) == 0
    assert_the_readers_follow(spark, location, first)

    table = DeltaTable(location)
    table.merge(
        customers((1, "z@x", "ann"), (2, "b@x", "bobby"), (4, "d@x", "di")),
        "t.id = s.id",
        source_alias="s",
        target_alias="t",
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    DeltaTable(location).delete("id = 3")
    write_deltalake(location, customers((5, "e@x", "eve")), mode="append")
    pipeline = load_pipeline(spec, lake_root=lake)
    waiting = {w.table: w for w in pipeline_backlog(pipeline)}
    assert waiting[MIRROR].versions == 3 and waiting[MIRROR].files >= 3, waiting[MIRROR]

    assert runner.main([str(spec)]) == 0
    assert_the_readers_follow(spark, location, first)
    history = spark.read.format("delta").load(str(paths.table_path(HISTORY)))
    assert history.where("__END_AT IS NOT NULL").count() == 2  # 1's email changed, 3 was deleted
    assert all(w.files == 0 for w in pipeline_backlog(pipeline)), pipeline_backlog(pipeline)

    DeltaTable(location).update(updates={"id": "9"}, predicate="id = 4")  # a key changed: 4 gone, 9 there
    DeltaTable(location).update(updates={"name": "'ann b'"}, predicate="id = 1")  # the key kept
    write_deltalake(location, customers((None, "n1@x", "nn"), (None, "n2@x", "nn")), mode="append")  # no key
    kept, renamed, moved, new = (1, "z@x", "ann b"), (2, "b@x", "robert"), (9, "f@x", "di"), (7, "g@x", "gus")
    write_deltalake(location, customers(kept, renamed, moved, new), mode="overwrite")  # 5 gone, the rest rewritten
    assert runner.main([str(spec)]) == 0
    assert_the_readers_follow(spark, location, first)
    for table_id in (MIRROR, HISTORY):  # each keyless insert and delete on its own, and nothing else
        kept_aside = spark.read.format("delta").load(str(paths.quarantine_path(table_id)))
        reasons = [r["reason"] for r in kept_aside.collect()]
        assert reasons == ["a key column, id, is null"] * 4, reasons
    summary = run_summary.latest("crm")
    assert {t["table"]: t["outcome"] for t in summary["tables"]} == {MIRROR: "succeeded", HISTORY: "succeeded"}
