"""The base of the spec loader: reading a YAML mapping's fields and the small values many parts share.

Each part of a spec (sources, sinks, joins, ...) is read by the functions of one module of this package; each takes
the file's `SpecCheck` first and reports every problem into it.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from millpond.spec.model import Freshness, RateLimit, Watermark
from millpond.spec.syntax import DDL_TYPES, DURATION, ddl_parts, goal_seconds

_BYTES = re.compile(r"^\d+\s*[kmgt]?b?$", re.IGNORECASE)  # a size as Spark reads maxBytesPerTrigger: 512m, 1g


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


class SpecCheck:
    """One spec file's check under way: where it is, the lake root its paths must stay under, and every problem
    found so far, so a user fixes a spec in one pass. Each loader function takes it first and reports into it."""

    def __init__(self, path: Path, lake_root: Path) -> None:
        self.path = path
        self.lake_root = lake_root
        self.problems: list[str] = []

    def problem(self, where: str, message: str, fix: str) -> None:
        self.problems.append(f"{self.path}: {where}: {message}. Fix: {fix}")


def fields(check: SpecCheck, where: str, raw: Any, allowed: dict[str, bool]) -> dict[str, Any]:
    """Check a mapping against its allowed fields (name -> required); unknown names are errors."""
    if not isinstance(raw, dict):
        got = type(raw).__name__
        check.problem(where or "(top level)", f"expected a mapping, got {got}", "see docs/spec.md")
        return {}
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"allowed fields: {', '.join(allowed)}"
            check.problem(_join(where, key), f"unknown field {key!r}", hint)
    for key, required in allowed.items():
        if required and key not in raw:
            check.problem(_join(where, key), "required field is missing", f"add '{key}:' to {where or 'the spec'}")
    return raw


def boolean(check: SpecCheck, where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        check.problem(where, f"{value!r} is not true/false", "use true or false")
    return bool(value)


def count(check: SpecCheck, where: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        check.problem(where, f"{value!r} is not a whole number >= {minimum}", f"use a whole number >= {minimum}")
        return minimum
    return value


def columns(check: SpecCheck, where: str, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(c, str) and c for c in raw):
        check.problem(where, f"{raw!r} is not a list of column names", "write e.g. [Device, Index]")
        return ()
    return tuple(raw)


def column_descriptions(check: SpecCheck, where: str, raw: Any) -> tuple[tuple[str, str], ...]:
    """`columns:`, a mapping of column name to its description (the column's comment in the table)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        check.problem(
            where, f"{raw!r} is not a mapping of column names to descriptions", "write e.g. {Device: The phone}"
        )
        return ()
    if not raw:
        check.problem(where, "describes no column", "describe at least one column, or drop `columns:`")
    found = []
    for name, text in raw.items():
        if not isinstance(text, str) or not text.strip():
            check.problem(f"{where}.{name}", f"{text!r} is not a description", "give the column a line of text")
        else:
            found.append((str(name), " ".join(text.split())))
    lowered = [name.lower() for name, _ in found]
    for name in sorted({n for n in lowered if lowered.count(n) > 1}):
        check.problem(where, f"column {name!r} is described twice (names are case-insensitive)", "keep one entry")
    return tuple(found)


def duration(check: SpecCheck, where: str, value: Any) -> None:
    if value is not None and not DURATION.match(str(value).strip()):
        check.problem(where, f"{value!r} is not a duration", "write e.g. '10 minutes' or '1 hour'")


def ddl(check: SpecCheck, where: str, text: str) -> None:
    """Light DDL check without a JVM: `name TYPE` pairs separated by top-level commas."""
    for column in ddl_parts(text):
        parts = column.replace("`", "").split(None, 1)
        base = parts[1].split("<")[0].split("(")[0].strip().lower() if len(parts) == 2 else ""
        if len(parts) != 2 or base.split()[0] not in DDL_TYPES:
            check.problem(where, f"{column!r} is not 'name TYPE'", "write Spark DDL, e.g. 'Device STRING, x DOUBLE'")


def watermark(check: SpecCheck, where: str, raw: Any) -> Watermark | None:
    if raw is None:
        return None
    spec = fields(check, where, raw, {"column": True, "delay": True})
    duration(check, f"{where}.delay", spec.get("delay"))
    return Watermark(str(spec.get("column", "")), str(spec.get("delay", "")))


def rate_limit(check: SpecCheck, where: str, raw: Any, kafka: bool = False) -> RateLimit:
    if raw is None:
        return RateLimit()
    if kafka:
        spec = fields(check, where, raw, {"max_offsets_per_trigger": False})
        offsets = spec.get("max_offsets_per_trigger")
        if offsets is not None:
            count(check, f"{where}.max_offsets_per_trigger", offsets, minimum=1)
        return RateLimit(max_offsets_per_trigger=offsets if isinstance(offsets, int) else None)
    spec = fields(check, where, raw, {"max_files_per_trigger": False, "max_bytes_per_trigger": False})
    files = spec.get("max_files_per_trigger")
    if files is not None:
        count(check, f"{where}.max_files_per_trigger", files, minimum=1)
    size = spec.get("max_bytes_per_trigger")
    if size is not None and not _BYTES.match(str(size)):
        check.problem(f"{where}.max_bytes_per_trigger", f"{size!r} is not a size", "use e.g. 512m or 1g")
    return RateLimit(files if isinstance(files, int) else None, str(size) if size is not None else None)


def freshness(check: SpecCheck, where: str, raw: Any) -> Freshness | None:
    """`freshness: {warn_after: 90 minutes, error_after: 2 hours, event_time: <column>}`; warn_after defaults to
    error_after (no warning before the table is stale)."""
    if raw is None:
        return None
    spec = fields(check, where, raw, {"warn_after": False, "error_after": True, "event_time": False})
    error_after = goal_seconds(spec.get("error_after"))
    if "error_after" in spec and error_after is None:
        check.problem(
            f"{where}.error_after", f"{spec['error_after']!r} is not a duration", "write e.g. 2h or '2 hours'"
        )
    warn_after = goal_seconds(spec["warn_after"]) if "warn_after" in spec else error_after
    if "warn_after" in spec and warn_after is None:
        check.problem(
            f"{where}.warn_after", f"{spec['warn_after']!r} is not a duration", "write e.g. 90m or '90 minutes'"
        )
    if error_after == 0:
        check.problem(f"{where}.error_after", "error_after is 0: the table would always be stale", "give it a duration")
    if warn_after is not None and error_after is not None and warn_after > error_after:
        check.problem(
            f"{where}.warn_after", "warn_after is longer than error_after", "make warn_after at most error_after"
        )
    event_time = spec.get("event_time")
    if event_time is not None and (not isinstance(event_time, str) or not event_time):
        check.problem(
            f"{where}.event_time", f"{event_time!r} is not a column name", "name the table's event-time column"
        )
    if error_after is None or warn_after is None:
        return None
    return Freshness(warn_after=warn_after, error_after=error_after, event_time=str(event_time) if event_time else None)
