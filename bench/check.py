"""Every side's tables against the plain-Python reference (tests/support/reference.py), before any figure is kept.

A side that wrote fewer rows, kept a duplicate or counted wrong cannot look fast: `make bench` fails instead. The
tables are read with delta-rs (no JVM), so a check costs seconds, not a Spark session. Each side names the tables it
builds; what both build must hold the same rows as the reference computes from the very same landed files.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from tests.support.reference import ActivityReference, activity_reference

TABLES = ("bronze", "quarantine", "silver", "device_counts", "activity_hourly")


class Mismatch(RuntimeError):
    """A side's table differs from the reference: its figures are not kept."""


def millpond_tables(lake: Path, tables: tuple[str, ...] = TABLES) -> dict[str, Path]:
    where = {
        "bronze": lake / "bronze" / "activity",
        "quarantine": lake / "bronze" / "activity_quarantine",
        "silver": lake / "silver" / "activity",
        "device_counts": lake / "gold" / "device_counts",
        "activity_hourly": lake / "gold" / "activity_hourly",
    }
    return {name: where[name] for name in tables}


def check(side: str, landing: Path, tables: dict[str, Path | list[dict]]) -> dict[str, int]:
    """Raise Mismatch naming the side and table unless every table given equals the reference over `landing`.

    A table is a Delta table's folder or its rows already read (DuckDB's). Returns the rows checked per table. A
    quarantine that was never written holds no rows.
    """
    reference = _reference(tuple(sorted(str(p) for p in landing.glob("*.json"))), landing)
    checked = {}
    for name, table in tables.items():
        if isinstance(table, list):
            rows = table
        elif name == "quarantine" and not (table / "_delta_log").is_dir():
            rows = []
        else:
            rows = _read(table, COLUMNS[name])
        problem = _compare(name, rows, reference)
        if problem:
            raise Mismatch(f"{side}: {name} ({table if isinstance(table, Path) else 'rows'}) differs: {problem}")
        checked[name] = len(rows)
    return checked


@cache
def _reference(files: tuple[str, ...], landing: Path) -> ActivityReference:
    return activity_reference(landing)


COLUMNS = {
    "bronze": ["Device", "Index"],
    "quarantine": None,
    "silver": ["Device", "Index", "Recorded_At"],
    "device_counts": ["Device", "total_recordings"],
    "activity_hourly": ["hour", "gt", "recordings", "avg_x", "avg_y", "avg_z"],
}


def _read(path: Path, columns: list[str] | None) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist()


def _iso(moment: datetime | str | None) -> str | None:
    """In the reference's form (UTC, milliseconds, Z); a string is taken as already in it."""
    if moment is None or isinstance(moment, str):
        return moment
    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _compare(name: str, rows: list[dict], reference: ActivityReference) -> str | None:
    if name == "bronze":
        expected = Counter((r.get("Device"), r.get("Index")) for r in reference.bronze)
        actual = Counter((r["Device"], r["Index"]) for r in rows)
        if actual != expected:
            return f"{len(rows)} rows, expected {len(reference.bronze)} ({sum((actual - expected).values())} extra)"
    elif name == "quarantine":
        if len(rows) != reference.quarantined:
            return f"{len(rows)} quarantined lines, expected {reference.quarantined}"
    elif name == "silver":
        keys = sorted((r["Device"], r["Index"], _iso(r["Recorded_At"])) for r in rows)
        if len(keys) != len(set(keys)):
            return f"{len(keys) - len(set(keys))} duplicate keys"
        if keys != sorted(reference.silver):
            return f"{len(keys)} keys, expected {len(reference.silver)}"
    elif name == "device_counts":
        counts = {r["Device"]: r["total_recordings"] for r in rows}
        if counts != reference.device_counts:
            return f"counts {sorted(counts.items())[:5]}..., expected {sorted(reference.device_counts.items())[:5]}..."
    elif name == "activity_hourly":
        hourly = {(_iso(r["hour"]), r["gt"]): r for r in rows}
        if set(hourly) != set(reference.hourly) or len(hourly) != len(rows):
            return f"{len(rows)} (hour, gt) rows, expected {len(reference.hourly)}"
        for key, want in reference.hourly.items():
            got = hourly[key]
            if got["recordings"] != want["recordings"] or any(
                abs(got[c] - want[c]) > 1e-9 for c in ("avg_x", "avg_y", "avg_z") if want[c] is not None
            ):
                return f"{key}: {got}, expected {want}"
    else:
        raise ValueError(f"unknown table {name}")
    return None
