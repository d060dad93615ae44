"""How a spec writes its values: names, function references, durations, Kafka addresses and Spark DDL.

Patterns and parsers only, shared by the model, the loader and the run-time environment check; none of them reports a
problem itself (the loader words each one for the field it is in).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
TABLE_ID = re.compile(r"^(bronze|silver|gold)\.[a-z][a-z0-9_]*$")
FUNCTION_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
DURATION = re.compile(r"^\d+\s+(second|minute|hour|day|week)s?$")
SIGNED_DURATION = re.compile(r"^-?\d+\s+(second|minute|hour|day|week)s?$")
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")  # `${NAME}`: an environment variable, read at run time
HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}$")
TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's own rule for topic names
DDL_TYPES = (
    "string",
    "varchar",
    "char",
    "boolean",
    "tinyint",
    "byte",
    "smallint",
    "short",
    "int",
    "integer",
    "bigint",
    "long",
    "float",
    "double",
    "real",
    "decimal",
    "numeric",
    "date",
    "timestamp",
    "timestamp_ntz",
    "timestamp_ltz",
    "binary",
    "array",
    "map",
    "struct",
    "variant",
)


def duration_seconds(text: str | None) -> int | None:
    """'10 minutes' -> 600; None for anything the duration check rejects (it reports that itself)."""
    match = DURATION.match(str(text or "").strip())
    if not match:
        return None
    return int(str(text).split()[0]) * _UNIT_SECONDS[match.group(1)]


SHORT_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")  # a freshness goal may also say 90m, 2h, 1d
_SHORT_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week"}


def goal_seconds(text: Any) -> int | None:
    """A freshness goal's duration: '90 minutes' as everywhere in the spec, or the short '90m', '2h', '1d';
    None for anything else."""
    value = str(text if text is not None else "").strip()
    short = SHORT_DURATION.match(value)
    if short:
        return int(short.group(1)) * _UNIT_SECONDS[_SHORT_UNITS[short.group(2)]]
    return duration_seconds(value)


def signed_seconds(text: str | None) -> int | None:
    """'-10 minutes' -> -600; None for anything the time_range check rejects (it reports that itself)."""
    value = str(text or "").strip()
    if not SIGNED_DURATION.match(value):
        return None
    return -duration_seconds(value[1:]) if value.startswith("-") else duration_seconds(value)  # type: ignore[operator]


def ddl_parts(text: str) -> list[str]:
    """A DDL string's column definitions: split at commas outside <...> and (...)."""
    depth, start, columns = 0, 0, []
    for i, char in enumerate(text + ","):
        depth += char in "<(" and 1 or char in ">)" and -1 or 0
        if char == "," and depth == 0:
            columns.append(text[start:i].strip())
            start = i + 1
    return columns


def ddl_columns(text: str) -> tuple[str, ...]:
    """Column names of a DDL string ('a STRING, b BIGINT' -> ('a', 'b'))."""
    return tuple(part.split(None, 1)[0].strip("`") for part in ddl_parts(text) if part.split())


def ddl_types(text: str) -> list[tuple[str, str]]:
    """(name, base type in lower case) of each column of a DDL string ('a STRING' -> [('a', 'string')])."""
    found = []
    for part in ddl_parts(text):
        pieces = part.replace("`", "").split(None, 1)
        if len(pieces) == 2:
            found.append((pieces[0], pieces[1].split("<")[0].split("(")[0].split()[0].lower()))
    return found


def did_you_mean(word: str, choices: list[str]) -> str:
    """' (did you mean X?)' when a choice is close to the word, else ''."""
    close = difflib.get_close_matches(word, choices, n=1) or [c for c in choices if c.lower() == word.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""
