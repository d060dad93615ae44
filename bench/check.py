"""Every side's tables against the plain-Python reference (tests/support/reference.py), before any figure is kept.

A side that wrote fewer rows, kept a duplicate or counted wrong cannot look fast: `make bench` fails instead. The
tables are read with delta-rs (no JVM), so a check costs seconds, not a Spark session. Each side names the tables it
builds; what both build must hold the same rows as the reference computes from the very same landed files.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from tests.support.reference import ActivityKeys, activity_keys

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
    reference = _reference(landing)
    checked = {}
    for name, table in tables.items():
        if isinstance(table, list):
            columns = {c: [r[c] for r in table] for c in COLUMNS[name]}
        elif name == "quarantine" and not (table / "_delta_log").is_dir():
            columns = {}
        else:
            columns = _read(table, COLUMNS[name])
        rows = len(next(iter(columns.values()), []))
        problem = _compare(name, columns, rows, reference)
        if problem:
            raise Mismatch(f"{side}: {name} ({table if isinstance(table, Path) else 'rows'}) differs: {problem}")
        checked[name] = rows
    return checked


_references: dict[tuple, ActivityKeys] = {}


def _reference(landing: Path) -> ActivityKeys:
    """The keys over `landing`, computed once per set of landed files: every lake's landing hard-links the same pool
    files, so the set is named by the files' names, devices, inodes and sizes, not by the folder. The large scale's
    keys take about 2 GB: the two newest sets are kept (B8 checks the history, then the history and the new unit)."""
    files = tuple(
        sorted((p.name, st.st_dev, st.st_ino, st.st_size) for p in landing.glob("*.json") for st in [p.stat()])
    )
    if files not in _references:
        while len(_references) >= 2:
            del _references[next(iter(_references))]
        _references[files] = activity_keys(landing)
    return _references[files]


COLUMNS = {
    "bronze": ["Device", "Index"],
    "quarantine": ["source_file"],  # one column: only the count is compared
    "silver": ["Device", "Index", "Recorded_At"],
    "device_counts": ["Device", "total_recordings"],
    "activity_hourly": ["hour", "gt", "recordings", "avg_x", "avg_y", "avg_z"],
}


def _read(path: Path, columns: list[str]) -> dict[str, list]:
    """The columns asked for, each a list (rows as dicts would take several times the memory at the large scale)."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pydict()


def _iso(moment: datetime | str | None) -> str | None:
    """In the reference's form (UTC, milliseconds, Z); a string is taken as already in it."""
    if moment is None or isinstance(moment, str):
        return moment
    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _compare(name: str, columns: dict[str, list], rows: int, reference: ActivityKeys) -> str | None:
    if name == "bronze":
        actual = Counter(zip(columns["Device"], columns["Index"], strict=True))
        if actual != reference.bronze:
            extra = sum((actual - reference.bronze).values())
            return f"{rows} rows, expected {reference.bronze.total()} ({extra} extra)"
    elif name == "quarantine":
        if rows != reference.quarantined:
            return f"{rows} quarantined lines, expected {reference.quarantined}"
    elif name == "silver":
        keys = set(zip(columns["Device"], columns["Index"], map(_iso, columns["Recorded_At"]), strict=True))
        if len(keys) != rows:
            return f"{rows - len(keys)} duplicate keys"
        if keys != reference.silver:
            return f"{rows} keys, expected {len(reference.silver)}"
    elif name == "device_counts":
        counts = dict(zip(columns["Device"], columns["total_recordings"], strict=True))
        if counts != reference.device_counts:
            return f"counts {sorted(counts.items())[:5]}..., expected {sorted(reference.device_counts.items())[:5]}..."
    elif name == "activity_hourly":
        found = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
        hourly = {(_iso(r["hour"]), r["gt"]): r for r in found}
        if set(hourly) != set(reference.hourly) or len(hourly) != rows:
            return f"{rows} (hour, gt) rows, expected {len(reference.hourly)}"
        for key, want in reference.hourly.items():
            got = hourly[key]
            if got["recordings"] != want["recordings"] or any(
                abs(got[c] - want[c]) > 1e-9 for c in ("avg_x", "avg_y", "avg_z") if want[c] is not None
            ):
                return f"{key}: {got}, expected {want}"
    else:
        raise ValueError(f"unknown table {name}")
    return None
