"""`millpond sql`: one query over the catalog, its result printed as an aligned table, csv (a header row first) or
json (an array of objects), for people and for scripts."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

FORMATS = ("table", "csv", "json")


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], form: str) -> str:
    if form == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_text(value) for value in row] for row in rows])
        return out.getvalue()
    if form == "json":
        return json.dumps([dict(zip(columns, map(_json_value, row), strict=True)) for row in rows], indent=1) + "\n"
    return _aligned(columns, rows)


def _aligned(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(columns)] + [[_text(value, "NULL") for value in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [" | ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip() for line in cells]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"


def _text(value: Any, null: str = "") -> str:
    if value is None:
        return null
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity: "nan", "inf", as Spark prints them
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if hasattr(value, "asDict"):  # a struct (pyspark Row)
        return _json_value(value.asDict(recursive=True))
    return value
