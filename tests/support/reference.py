"""The activity tables computed another way: plain Python over the landed files, no Spark.

Used by every exactness test: row counts, keys and every gold value must match this.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
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
    if record.get("Index") is not None and (isinstance(record["Index"], bool) or not isinstance(record["Index"], int)):
        return None
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
    lines = [
        line
        for path in sorted(landing.rglob("*.json") if recursive else landing.glob("*.json"))
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip()
    ]
    bronze = [r for r in map(well_formed, lines) if r is not None]
    silver: dict[tuple, dict] = {}
    for record in bronze:
        if record.get("Device") is None or record.get("Recorded_At") is None:
            continue
        silver.setdefault((record["Device"], record.get("Index"), _ts(record["Recorded_At"])), record)
    device_counts = Counter(key[0] for key in silver)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for key, record in silver.items():
        groups[(key[2][:13] + ":00:00.000Z", record.get("gt"))].append(record)
    hourly = {
        key: {"recordings": len(rows), **{f"avg_{c}": _avg([r.get(c) for r in rows]) for c in DOUBLES}}
        for key, rows in groups.items()
    }
    return ActivityReference(len(lines), bronze, len(lines) - len(bronze), silver, dict(device_counts), hourly)


def _ts(text: str) -> str:
    """Normalise to the ISO form the Spark side is read back in (UTC, milliseconds, Z)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _avg(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
