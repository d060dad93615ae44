"""The activity tables computed another way: plain Python over the landed files, no Spark.

Used by every exactness test: row counts, keys and every gold value must match this.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

STRINGS = ("Device", "Model", "User", "gt")
DOUBLES = ("x", "y", "z")


@dataclass
class ActivityReference:
    lines: int  # non-blank landed lines
    bronze: list[dict]
    quarantined: int
    silver: dict[tuple, dict]  # (Device, Index, Recorded_At) -> row
    device_counts: dict[str, int]
    hourly: dict[tuple, dict]  # (hour iso, gt) -> {recordings, avg_x, avg_y, avg_z}


def well_formed(line: str) -> dict | None:
    """Spark's typed JSON parse, restated: an object whose present fields have the schema's types."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    for name in STRINGS:
        if record.get(name) is not None and not isinstance(record[name], str):
            return None
    index = record.get("Index")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or not -(2**63) <= index < 2**63):
        return None  # a long: Spark's parse of a larger integer fails
    for name in DOUBLES:
        value = record.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return None
    if record.get("Recorded_At") is not None:
        try:
            datetime.fromisoformat(str(record["Recorded_At"]).replace("Z", "+00:00"))
        except ValueError:
            return None
    return record


def activity_reference(landing: Path, recursive: bool = False) -> ActivityReference:
    """`recursive`: the files of the landing folder's subfolders too (a source with a `layout`)."""
    lines = 0
    bronze: list[dict] = []
    silver: dict[tuple, dict] = {}
    gold = _Gold()
    for record, first_of_key in _scan(landing, recursive, gold):
        lines += 1
        if record is not None:
            bronze.append(record)
        if first_of_key is not None:
            silver[first_of_key] = record
    return ActivityReference(lines, bronze, lines - len(bronze), silver, dict(gold.device_counts), gold.hourly())


@dataclass
class ActivityKeys:
    """What `activity_reference` computes, without the rows: small enough for the benchmarks' 1 GB of landed files
    (the rows as dicts would take over 20 GB), and the same values, from the same pass."""

    lines: int
    bronze: Counter  # (Device, Index) -> how many bronze rows carry it
    quarantined: int
    silver: set[tuple]  # (Device, Index, Recorded_At)
    device_counts: dict[str, int]
    hourly: dict[tuple, dict]


def activity_keys(landing: Path, recursive: bool = False) -> ActivityKeys:
    """`activity_reference` without the rows (bench/check.py at the large scale)."""
    lines = 0
    bronze: Counter = Counter()
    silver: set[tuple] = set()
    gold = _Gold()
    for record, first_of_key in _scan(landing, recursive, gold):
        lines += 1
        if record is not None:
            device = record.get("Device")
            bronze[(sys.intern(device) if device is not None else None, record.get("Index"))] += 1
        if first_of_key is not None:
            silver.add(first_of_key)
    return ActivityKeys(lines, bronze, lines - bronze.total(), silver, dict(gold.device_counts), gold.hourly())


def _scan(landing: Path, recursive: bool, gold: _Gold) -> Iterator[tuple[dict | None, tuple | None]]:
    """Each non-blank landed line parsed (None: malformed), with its silver key when it is the first row of that key
    (silver keeps it, and it is added to `gold`), else None: the one pass both forms of the reference share."""
    seen: set[tuple] = set()
    for record in _records(landing, recursive):
        key = _silver_key(record) if record is not None else None
        if key is None or key in seen:
            yield record, None
            continue
        seen.add(key)
        gold.add(key, record)
        yield record, key


def _records(landing: Path, recursive: bool) -> Iterator[dict | None]:
    """Each non-blank landed line, in file order, parsed (None: malformed); one file in memory at a time."""
    for path in sorted(landing.rglob("*.json") if recursive else landing.glob("*.json")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                yield well_formed(line)


def _silver_key(record: dict) -> tuple | None:
    """Silver's dedup key (Device, Index, Recorded_At), or None for a row silver filters out."""
    if record.get("Device") is None or record.get("Recorded_At") is None:
        return None
    return (sys.intern(record["Device"]), record.get("Index"), _ts(record["Recorded_At"]))


class _Gold:
    """The gold tables over silver's rows, fed in silver's order (the first row of each key): per-device counts, and
    per (UTC hour, gt) the rows and the mean of each double (summed left to right, as `sum` would)."""

    def __init__(self) -> None:
        self.device_counts: Counter = Counter()
        self.groups: dict[tuple, list] = {}  # (hour, gt) -> [rows, sums per double, present values per double]

    def add(self, key: tuple, record: dict) -> None:
        self.device_counts[key[0]] += 1
        group = self.groups.setdefault(
            (key[2][:13] + ":00:00.000Z", record.get("gt")), [0, [0] * len(DOUBLES), [0] * len(DOUBLES)]
        )
        group[0] += 1
        for i, column in enumerate(DOUBLES):
            value = record.get(column)
            if value is not None:
                group[1][i] += value
                group[2][i] += 1

    def hourly(self) -> dict[tuple, dict]:
        return {
            key: {
                "recordings": rows,
                **{f"avg_{c}": sums[i] / present[i] if present[i] else None for i, c in enumerate(DOUBLES)},
            }
            for key, (rows, sums, present) in self.groups.items()
        }


def _ts(text: str) -> str:
    """Normalise to the ISO form the Spark side is read back in (UTC, milliseconds, Z)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
