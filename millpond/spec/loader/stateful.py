"""A table's `stateful:` function (applyInPandasWithState): its reference, key, schemas and timeout."""

from __future__ import annotations

import re
from typing import Any

from millpond.spec.loader.fields import SpecCheck, columns, ddl, fields
from millpond.spec.model import TIMEOUTS, Stateful, Table
from millpond.spec.syntax import FUNCTION_REF, ddl_parts
from millpond.spec.user_code import function_problems

# A `stateful:` block's fields (name -> required).
STATEFUL_FIELDS = {
    "function": True,
    "key": True,
    "output_schema": True,
    "state_schema": True,
    "timeout": False,
    "options": False,
}


def stateful(check: SpecCheck, where: str, raw: Any) -> Stateful | None:
    if raw is None:
        return None
    spec = fields(check, where, raw, STATEFUL_FIELDS)
    if not spec:
        return None
    options = spec.get("options") or {}
    if not isinstance(options, dict):
        check.problem(
            f"{where}.options",
            "expected a mapping of keyword arguments for the function",
            "e.g. options: {timestamp: ts, gap: 30 minutes}",
        )
        options = {}
    function = str(spec.get("function") or "")
    if "function" in spec and not FUNCTION_REF.match(function):
        check.problem(
            f"{where}.function",
            f"{function!r} is not 'module:function'",
            "e.g. spark_jobs.transforms.sessions:sessions",
        )
    elif function:
        for field_name, message, fix in function_problems(function, [str(k) for k in options]):
            check.problem(f"{where}.{field_name}", message, fix)
    key = columns(check, f"{where}.key", spec.get("key"))
    if "key" in spec and spec.get("key") in (None, [], ""):
        check.problem(
            f"{where}.key",
            "a stateful function keeps one state per key, and no key column is given",
            "e.g. key: [Device]",
        )
    schema_rules(check, where, spec)
    timeout = str(spec.get("timeout", "event_time"))
    if timeout not in TIMEOUTS:
        check.problem(
            f"{where}.timeout",
            f"unknown timeout {timeout!r}",
            "use event_time (the function is called again once the watermark passes the time it set) or none",
        )
    return Stateful(
        function,
        key,
        str(spec.get("output_schema") or ""),
        str(spec.get("state_schema") or ""),
        timeout,
        {str(k): v for k, v in options.items()},
    )


def schema_rules(check: SpecCheck, where: str, spec: dict[str, Any]) -> None:
    """The output and state schemas are DDL, and the state has no ARRAY column."""
    for name in ("output_schema", "state_schema"):
        if name in spec:
            ddl(check, f"{where}.{name}", str(spec.get(name) or ""))
    arrays = [c for c in ddl_parts(str(spec.get("state_schema") or "")) if re.search(r"\barray\s*<", c, re.I)]
    if arrays:
        check.problem(
            f"{where}.state_schema",
            f"{', '.join(map(repr, arrays))}: PySpark 4.2's Python worker cannot "
            "read an ARRAY column of a state schema (the query fails on its first batch)",
            "keep the list in a STRING column (e.g. JSON), as spark_jobs.transforms.sessions does",
        )


def stateful_rules(check: SpecCheck, where: str, table: Table) -> None:
    """What applyInPandasWithState needs from the rest of the table."""
    stateful = table.stateful
    assert stateful is not None
    others = [name for name, present in (("aggregate", table.aggregate), ("dedup", table.dedup_keys)) if present]
    if others:
        moved = " and ".join(others)
        check.problem(
            f"{where}.stateful",
            f"a stateful function cannot share a table with {' or '.join(others)} "
            "(two stateful operators in one query, each with its own output-mode rules)",
            f"move the {moved} to the table this one reads (or to one that reads it)",
        )
    if stateful.timeout == "event_time" and not table.watermark:
        check.problem(
            f"{where}.stateful.timeout",
            "an event_time timeout fires once the watermark passes the time "
            "the function set, and this table has no watermark",
            "add 'watermark: {column: <event time>, delay: ...}', or use timeout: none",
        )
