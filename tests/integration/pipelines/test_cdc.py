"""Change feeds into SCD 1 and SCD 2 tables (`cdc:`) on real Spark + Delta, against a plain-Python fold of every event
landed so far (tests/support/cdc_reference.py).

The property test draws event histories (inserts, updates, deletes, exact duplicates, a delete before any insert, a
re-insert after a delete, ties on `seq` broken by `tie`), cuts each into batches landed in a random arrival order, one
file per run, and SIGKILLs one run of each history at a point it draws: before a table's write, between its change
store's commit and its own, or after both (the replay must add no Delta version). After every run both tables equal
the fold. Cost: each history is 2-3 runs on the test worker's session plus one killed run in a process of its own
(its death is the subject). Three histories: one written out (ACROSS_RUNS: a kill between SCD 2's store and table
commits, a version split by a late event, a delete and a re-insert across runs) and two drawn, derandomized, so CI
runs the same ones every time (about 150 s). MILLPOND_CDC_EXAMPLES=<n> draws more.

A table may apply another's Delta change data feed (`change_feed: true`): one test runs an SCD 1 and an SCD 2 reader
of silver.customers' feed, killed, against time travel of silver.customers (about 105 s). The file takes about 270 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from millpond.dev.sample_data import customer_change_files
from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from millpond.runs import run_summary
from tests.support.cdc_reference import (
    BY_COMMIT,
    BY_VERSION,
    CHANGE_FEED_SPEC,
    MIRROR,
    SCD1,
    SCD2,
    assert_the_example_follows,
    changes_between,
    fold_scd2,
    land,
    landed,
    scd1,
    scd2,
    write_spec,
)

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")
FAULTS = ("before_write", "between_writes", "after_write")

EVENT = st.fixed_dictionaries(
    {
        "id": st.integers(1, 3),
        "seq": st.integers(0, 4),
        "tie": st.integers(0, 1),
        "op": st.sampled_from(["I", "U", "D"]),
        "email": st.sampled_from(["a@x", "b@x"]),
        "name": st.sampled_from(["x", "y"]),
    }
)


@st.composite
def arrivals(draw) -> list[list[dict]]:
    """A history's events, some twice, in a random order, cut into 2-3 batches."""
    events = draw(st.lists(EVENT, min_size=2, max_size=12, unique_by=lambda e: (e["id"], e["seq"], e["tie"])))
    twice = draw(st.lists(st.sampled_from(events), max_size=3))
    arrived = draw(st.permutations(events + twice))
    cuts = sorted(draw(st.sets(st.integers(1, len(arrived) - 1), min_size=1, max_size=2)))
    bounds = [0, *cuts, len(arrived)]
    return [arrived[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def tables(spark) -> dict[str, list[tuple]]:
    """Each table's rows, sorted: a list, not a set, so a row written twice shows."""

    def read(table_id: str):
        return spark.read.format("delta").load(str(paths.table_path(table_id)))

    def at(value) -> tuple | None:
        return None if value is None else (value["seq"], value["tie"])

    current = read(SCD1).select("id", "seq", "tie", "email", "name").collect()
    history = read(SCD2).select("id", "email", "name", "__START_AT", "__END_AT").collect()
    return {
        SCD1: sorted((tuple(r) for r in current), key=repr),
        SCD2: sorted(
            ((r["id"], r["email"], r["name"], at(r["__START_AT"]), at(r["__END_AT"])) for r in history), key=repr
        ),
    }


def assert_equals_the_fold(spark, lake: Path) -> None:
    events = landed(lake)
    assert tables(spark) == {SCD1: sorted(scd1(events), key=repr), SCD2: sorted(scd2(events), key=repr)}, events


def change(key, seq, op, email, name="x", tie=0) -> dict:
    return {"id": key, "seq": seq, "tie": tie, "op": op, "email": email, "name": name}


# A history CI always runs beside the drawn ones: its second run, killed between SCD 2's store and table commits,
# brings a late event that splits a version an earlier run wrote (the later version vanishes, its values move) and a
# delete of a key written earlier; the third a re-insert of that key, a value-changing update, an older update that
# changes nothing, and a duplicate.
ACROSS_RUNS = [
    [change(1, 1, "I", "a@x"), change(1, 3, "U", "b@x"), change(2, 1, "I", "a@x", "y"), change(3, 2, "U", "a@x")],
    [change(1, 2, "U", "b@x", "y"), change(2, 2, "D", None, None), change(3, 1, "D", None, None)],
    [
        change(2, 3, "I", "a@x", "y"),
        change(1, 4, "U", "a@x", "z"),
        change(1, 0, "U", "b@x"),
        change(1, 2, "U", "b@x", "y"),
    ],
]


def versions(table_id: str) -> tuple[int, ...]:
    return tuple(
        latest_version(p)
        for p in (paths.table_path(table_id), paths.changes_path(table_id), paths.quarantine_path(table_id))
    )


def run_killed(spec: Path, lake: Path, fault: str) -> None:
    env = {**os.environ, "MILLPOND_LAKE": str(lake), "MILLPOND_FAULT": fault}
    done = subprocess.run([MILLPOND, "run", str(spec)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, f"expected a SIGKILL at {fault}:\n{done.stdout[-3000:]}"


@settings(
    max_examples=int(os.environ.get("MILLPOND_CDC_EXAMPLES", "2")),  # more for a thorough run outside CI
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example is real runs, minutes to shrink
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    batches=arrivals(),
    killed=st.integers(0, 2),  # the run killed (the last one where a history has fewer)
    table=st.sampled_from([SCD1, SCD2]),
    fault=st.sampled_from(FAULTS),
)
@example(batches=ACROSS_RUNS, killed=1, table=SCD2, fault="between_writes")
def test_any_arrival_order_with_a_killed_run_equals_the_fold_of_all_events(spark, batches, killed, table, fault):
    killed = min(killed, len(batches) - 1)
    with tempfile.TemporaryDirectory() as folder:
        lake = Path(folder) / "lake"
        spec = write_spec(Path(folder))
        with mock.patch.dict(os.environ, {"MILLPOND_LAKE": str(lake)}):
            for number, batch in enumerate(batches):
                land(lake, f"batch-{number}", batch)
                if number == killed:
                    run_killed(spec, lake, f"{table}:{fault}")
                    before = versions(table)
                    assert runner.main([str(spec)]) == 0
                    after = versions(table)  # (table, change store, quarantine)
                    if fault == "after_write":  # both commits made: the replayed batch is skipped, all of it
                        assert after == before
                    if fault == "between_writes":  # the store's commit is skipped, the table's is made
                        assert after[1:] == before[1:] and after[0] > before[0], (before, after)
                else:
                    assert runner.main([str(spec)]) == 0
                assert_equals_the_fold(spark, lake)


def quarantined(spark, table_id: str) -> list[tuple]:
    rows = spark.read.format("delta").load(str(paths.quarantine_path(table_id))).collect()
    return sorted(((json.loads(r["record"]).get("id"), r["reason"].split(" (")[0]) for r in rows), key=str)


def test_events_that_cannot_be_applied_are_quarantined_with_why_and_a_full_refresh_equals_the_fold(spark, lake):
    """A null key or sequence, and two different events of one key at one sequence (in one batch, or the second
    arriving after the first was applied), go to each table's quarantine; the rest is applied. A full refresh reads
    every event in one batch, so there both events of the later clash are set aside too: the fold's rule."""
    spec = write_spec(lake.parent)

    def event(key, seq, email, op="U", name="x"):
        return {"id": key, "seq": seq, "tie": 0, "op": op, "email": email, "name": name}

    land(
        lake,
        "first",
        [
            event(1, 1, "a@x", op="I"),
            event(1, 2, "a@x", name="y"),  # SCD 2: an untracked change, in place
            event(2, None, "a@x"),
            event(None, 1, "a@x"),
            event(3, 1, "a@x"),
            event(3, 1, "b@x"),  # clashes with the one above
        ],
    )
    assert runner.main([str(spec)]) == 0
    counted = {t["table"]: t["rows_quarantined"] for t in run_summary.latest("customers")["tables"]}
    assert counted[SCD1] == counted[SCD2] == 4  # a null key, a null sequence, the clashing pair
    land(lake, "second", [event(1, 2, "b@x", name="y")])  # clashes with an event applied in the first run
    assert runner.main([str(spec)]) == 0

    clash = "another event of this key has the same sequence and other values"
    expected = [
        (None, "a key column, id, is null"),
        (1, clash),
        (2, "a sequence_by column, seq, is null"),
        (3, clash),
        (3, clash),
    ]
    assert quarantined(spark, SCD1) == quarantined(spark, SCD2) == sorted(expected, key=str)
    assert tables(spark) == {
        SCD1: [(1, 2, 0, "a@x", "y")],  # the first of the clashing pair was applied when it arrived
        SCD2: [(1, "a@x", "y", (1, 0), None)],
    }

    assert runner.main([str(spec), "--full-refresh", f"{SCD1},{SCD2}"]) == 0
    assert_equals_the_fold(spark, lake)
    assert tables(spark)[SCD1] == [(1, 1, 0, "a@x", "x")]  # both events of id 1 at seq 2 set aside


def test_the_example_debezium_feed_run_twice_equals_the_fold_of_its_envelopes(spark, lake):
    """The shipped `customers` pipeline on what `millpond generate customers` lands: envelopes out of order, some a
    file late, some twice; after each run its SCD 1 and SCD 2 tables equal the fold of every envelope landed, and
    the contacts table, which applies silver.customers' change feed, holds silver.customers' rows."""
    folder = lake / "landing" / "customer_changes"
    for seed in (1, 2):
        customer_change_files(folder, files=2, rows=120, duplicates=0.05, seed=seed)
        assert runner.main(["customers"]) == 0
        rows = assert_the_example_follows(spark, landed(lake))
        contacts = spark.read.format("delta").load(str(paths.table_path("silver.customer_contacts")))
        assert sorted(tuple(r) for r in contacts.select("id", "email", "tier").collect()) == sorted(
            (r["id"], r["email"], r["tier"]) for r in rows
        )  # silver.customers' change feed, applied


def states_since_the_feed_was_turned_on(spark) -> list[tuple[int, dict]]:
    """silver.customers at each version from the one that turned its change feed on (the feed's readers started
    there, reading that version's rows as inserts) to the newest, read by time travel: not through the feed."""
    path = str(paths.table_path(SCD1))
    turned_on = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation = 'SET TBLPROPERTIES'")
    first = turned_on.agg({"version": "max"}).collect()[0][0]
    assert first is not None, "the change feed's reader did not turn the feed on"
    states = []
    for version in range(first, latest_version(path) + 1):
        rows = spark.read.format("delta").option("versionAsOf", version).load(path).collect()
        states.append((version, {r["id"]: {"email": r["email"], "name": r["name"]} for r in rows}))
    return states


def assert_the_feed_readers_follow(spark, lake: Path) -> None:
    """The mirror holds what silver.customers holds: the fold of every event landed. The history by commit holds
    the versions silver.customers' snapshots show."""

    def rows(table_id: str, columns: tuple[str, ...]) -> list[tuple]:
        read = spark.read.format("delta").load(str(paths.table_path(table_id)))
        return sorted((tuple(r) for r in read.select(*columns).collect()), key=repr)

    assert rows(MIRROR, ("id", "seq", "tie", "email", "name")) == sorted(scd1(landed(lake)), key=repr)
    events = changes_between(states_since_the_feed_was_turned_on(spark))
    expected = sorted(
        (
            (key, kept["email"], kept["name"], start, end)
            for key, kept, start, end in fold_scd2(events, BY_VERSION, ("email",))
        ),
        key=repr,
    )
    assert rows(BY_COMMIT, ("id", "email", "name", "__START_AT", "__END_AT")) == expected, events


def test_a_cdc_table_applies_another_s_change_feed_exactly_once_across_kills_and_a_full_refresh(spark, lake):
    """silver.customers (SCD 1) is read through its Delta change data feed by a mirror (SCD 1) and a history by
    commit version (SCD 2), which turn the feed on at their first run and read silver.customers' rows then as
    inserts. After every run the mirror equals silver.customers and the history equals the versions its snapshots
    show (time travel, not the feed). Killed between the history's store and table commits, and after the mirror's
    commit, the replayed batches add only the history's table commit. A full refresh of silver.customers rebuilds
    all three and turns the feed on again on the new table. Cost: four runs on the test worker's session and two
    killed runs in processes of their own."""
    spec = write_spec(lake.parent, CHANGE_FEED_SPEC)
    land(lake, "batch-0", ACROSS_RUNS[0])
    assert runner.main([str(spec)]) == 0
    assert_the_feed_readers_follow(spark, lake)

    for number, (table, fault) in enumerate(((BY_COMMIT, "between_writes"), (MIRROR, "after_write")), start=1):
        land(lake, f"batch-{number}", ACROSS_RUNS[number])
        run_killed(spec, lake, f"{table}:{fault}")
        before = versions(table)
        assert runner.main([str(spec)]) == 0
        after = versions(table)
        if fault == "after_write":
            assert after == before
        else:
            assert after[1:] == before[1:] and after[0] > before[0], (before, after)
        assert_the_feed_readers_follow(spark, lake)
    history = spark.read.format("delta").load(str(paths.table_path(BY_COMMIT)))
    assert history.where("__END_AT IS NOT NULL").count() >= 2  # the feed closed versions (the mirror shows deletes)
    assert runner.main([str(spec), "--full-refresh", SCD1]) == 0
    assert_the_feed_readers_follow(spark, lake)
