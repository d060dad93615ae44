"""The CDC test pipeline (landing json -> bronze -> an SCD 1 and an SCD 2 table) and its plain-Python reference: a
fold of every event landed so far in sequence order, written from docs/cdc.md's rules without Spark."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SPEC = {
    "pipeline": "customers",
    "schedule": "@hourly",
    "start_date": "2026-11-01",
    "shuffle_partitions": 2,
    "sources": {
        "customer_changes": {
            "format": "json",
            "path": "landing/customer_changes",
            "schema": "id INT, seq INT, tie INT, op STRING, email STRING, name STRING",
        }
    },
    "tables": {
        "bronze.customer_changes": {"from": "landing.customer_changes"},
        "silver.customers": {
            "from": "bronze.customer_changes",
            "cdc": {
                "keys": ["id"],
                "sequence_by": ["seq", "tie"],
                "apply_as_deletes": "op = 'D'",
                "except_columns": ["op", "_source_file", "_ingested_at", "_rescued_data"],
            },
        },
        "silver.customers_history": {
            "from": "bronze.customer_changes",
            "cdc": {
                "keys": ["id"],
                "sequence_by": ["seq", "tie"],
                "apply_as_deletes": "op = 'D'",
                "columns": ["id", "email", "name"],
                "scd_type": 2,
                "track_history_columns": ["email"],
            },
        },
    },
}
SCD1, SCD2 = "silver.customers", "silver.customers_history"

# silver.customers' change data feed applied twice: mirrored (SCD 1, Delta's columns left out by default) and as a
# history by silver.customers' commit versions (SCD 2, on email). The events' own SCD 2 table is left out.
MIRROR, BY_COMMIT = "silver.customers_mirror", "silver.customers_by_commit"
CHANGE_FEED_SPEC = {
    **SPEC,
    "tables": {
        "bronze.customer_changes": SPEC["tables"]["bronze.customer_changes"],
        SCD1: SPEC["tables"][SCD1],
        MIRROR: {"from": SCD1, "cdc": {"change_feed": True, "keys": ["id"]}},
        BY_COMMIT: {
            "from": SCD1,
            "cdc": {
                "change_feed": True,
                "keys": ["id"],
                "columns": ["id", "email", "name"],
                "scd_type": 2,
                "track_history_columns": ["email"],
            },
        },
    },
}


def write_spec(folder: Path, spec: dict | None = None) -> Path:
    path = folder / "customers.yaml"
    path.write_text(yaml.safe_dump(spec or SPEC, sort_keys=False))
    return path


def delta_source_spec(folder: Path, **table) -> Path:
    """A pipeline whose one table reads another job's Delta table (`delta.crm`)."""
    spec = {
        "pipeline": "crm",
        "schedule": "@hourly",
        "start_date": "2026-11-01",
        "sources": {"crm": {"format": "delta", "path": "crm/customers"}},
        "tables": {"silver.crm_mirror": {"from": "delta.crm", **table}},
    }
    path = folder / "crm.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def land(lake: Path, name: str, events: list[dict]) -> None:
    """One landing file of events, renamed into place whole (the file source never sees half a file)."""
    folder = lake / "landing" / "customer_changes"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(e) + "\n" for e in events))
    tmp.replace(folder / f"{name}.json")


def landed(lake: Path) -> list[dict]:
    folder = lake / "landing" / "customer_changes"
    return [json.loads(line) for f in sorted(folder.glob("*.json")) for line in f.read_text().splitlines() if line]


Event = dict[str, Any]


@dataclass(frozen=True)
class Feed:
    """How a table reads an event: its key, its sequence, whether it deletes, and the values the table keeps."""

    key: Callable[[Event], Any]
    sequence: Callable[[Event], Any]  # None where a sequence column is null
    deletes: Callable[[Event], bool]
    kept: Callable[[Event], dict[str, Any]]  # the table's value columns (not the keys)


def applicable(events: list[Event], feed: Feed) -> dict[Any, list[tuple[Any, bool, dict]]]:
    """Per key, (sequence, deletes, kept values) of its distinct events in sequence order. Rows with a null key or
    sequence, and every event of a (key, sequence) that two events different in what the table keeps (or in being a
    delete) share, are left out: they go to the quarantine."""
    by_sequence: dict[tuple, set[str]] = {}
    for e in events:
        key, sequence = feed.key(e), feed.sequence(e)
        if key is not None and sequence is not None:
            content = json.dumps([feed.deletes(e), feed.kept(e)], sort_keys=True)
            by_sequence.setdefault((key, sequence), set()).add(content)
    per_key: dict[Any, list[tuple[Any, bool, dict]]] = {}
    for (key, sequence), distinct in by_sequence.items():
        if len(distinct) == 1:
            deletes, kept = json.loads(distinct.pop())
            per_key.setdefault(key, []).append((sequence, deletes, kept))
    return {k: sorted(v, key=lambda event: event[0]) for k, v in per_key.items()}


def fold_scd1(events: list[Event], feed: Feed) -> dict[Any, dict]:
    """Each key whose newest event is not a delete, with that event's values."""
    newest = {key: ordered[-1] for key, ordered in applicable(events, feed).items()}
    return {key: kept for key, (_, deletes, kept) in newest.items() if not deletes}


def fold_scd2(events: list[Event], feed: Feed, tracked: tuple[str, ...]) -> list[tuple[Any, dict, Any, Any]]:
    """(key, values, start, end) per version: an upsert opens one after nothing, a delete, or a change of a tracked
    column, else updates the open one in place; a delete closes it; end is None on the open version."""
    rows = []
    for key, ordered in applicable(events, feed).items():
        versions: list[list] = []
        open_version: list | None = None
        for sequence, deletes, kept in ordered:
            if deletes:
                if open_version is not None:
                    open_version[3] = sequence
                open_version = None
            elif open_version is not None and all(open_version[1][c] == kept[c] for c in tracked):
                open_version[1] = kept  # only untracked columns changed: the version in place
            else:
                if open_version is not None:
                    open_version[3] = sequence
                open_version = [key, kept, sequence, None]
                versions.append(open_version)
        rows.extend(tuple(v) for v in versions)
    return rows


# The test pipeline's two tables read the events alike: key id, sequence (seq, tie), a delete where op = 'D'.
TEST_FEED = Feed(
    key=lambda e: e["id"],
    sequence=lambda e: None if e["seq"] is None or e["tie"] is None else (e["seq"], e["tie"]),
    deletes=lambda e: e["op"] == "D",
    kept=lambda e: {"email": e["email"], "name": e["name"]},
)


def changes_between(states: list[tuple[int, dict[Any, dict]]]) -> list[Event]:
    """A table's changes from its successive states (version, rows by key), as events sequenced by version: every
    row of the first state inserted, then each row that appears, changes or goes. What a change data feed read from
    the first state's version should say, derived from snapshots instead of the feed."""
    events: list[Event] = []
    before: dict[Any, dict] = {}
    for version, rows in states:
        for key in sorted(set(before) | set(rows), key=repr):
            if rows.get(key) != before.get(key):
                gone = key not in rows
                events.append({"id": key, "version": version, "deleted": gone, **(before[key] if gone else rows[key])})
        before = rows
    return events


BY_VERSION = Feed(
    key=lambda e: e["id"],
    sequence=lambda e: e["version"],
    deletes=lambda e: e["deleted"],
    kept=lambda e: {"email": e["email"], "name": e["name"]},
)


def scd1(events: list[Event]) -> set[tuple]:
    """silver.customers: (id, seq, tie, email, name); seq and tie are kept too, and equal the newest event's."""
    rows = set()
    for key, ordered in applicable(events, TEST_FEED).items():
        sequence, deletes, kept = ordered[-1]
        if not deletes:
            rows.add((key, *sequence, kept["email"], kept["name"]))
    return rows


def scd2(events: list[Event]) -> set[tuple]:
    """silver.customers_history: (id, email, name, start, end), history tracked on email."""
    return {
        (key, kept["email"], kept["name"], start, end)
        for key, kept, start, end in fold_scd2(events, TEST_FEED, ("email",))
    }


# The example pipeline's envelopes (`millpond generate customers`, pipelines/customers.yaml) as events.
ENVELOPES = Feed(
    key=lambda e: (e["after"] or e["before"])["id"],
    sequence=lambda e: e["source"]["lsn"],
    deletes=lambda e: e["op"] == "d",
    kept=lambda e: {c: (e["after"] or {}).get(c) for c in ("email", "name", "tier")},
)


def assert_the_example_follows(spark, envelopes: list[Event]) -> list[tuple]:
    """The example's silver.customers (SCD 1, with each key's newest lsn) and silver.customers_history (SCD 2 on
    email and tier) equal the fold of the envelopes; returns silver.customers' rows."""
    from millpond.lake import paths  # the rule book itself needs no lake

    current = spark.read.format("delta").load(str(paths.table_path("silver.customers")))
    rows = current.select("id", "email", "name", "tier", "lsn").collect()
    assert sorted(tuple(r) for r in rows) == sorted(
        (key, kept["email"], kept["name"], kept["tier"], applicable(envelopes, ENVELOPES)[key][-1][0])
        for key, kept in fold_scd1(envelopes, ENVELOPES).items()
    )
    history = spark.read.format("delta").load(str(paths.table_path("silver.customers_history")))
    columns = ("id", "email", "name", "tier", "__START_AT", "__END_AT")
    assert sorted((tuple(r) for r in history.select(*columns).collect()), key=repr) == sorted(
        (
            (key, kept["email"], kept["name"], kept["tier"], start, end)
            for key, kept, start, end in fold_scd2(envelopes, ENVELOPES, ("email", "tier"))
        ),
        key=repr,
    )
    return rows
