"""Expectation suites as reviewable JSON in `expectations/<pipeline>.<layer>.<table>.json`, read without GX.

A suite file is a GX 1.x suite (`name`, `expectations: [{type, kwargs, meta}]`); each expectation's
`meta.severity` says what a failure does:

    fail  the batch is not committed: the table and everything downstream stay unchanged, the run fails
    warn  reported only
    drop  the failing rows go to the table's quarantine (rule name + run id) and never reach downstream tables

Why a light module: `millpond validate` and the spec checks read suites in milliseconds, while importing
great_expectations takes seconds. Only row-level expectations can `drop` (a row is either in or out), and for
those the row mask is restated here as Spark SQL, so the gate splits rows exactly as GX counted them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from millpond import settings

SEVERITIES = ("fail", "warn", "drop")

# Row-level expectation types: the unexpected rows of a batch are those where the SQL predicate is true.
# Nulls follow GX: a column map expectation ignores null values (except the not-null one).
ROW_LEVEL = (
    "expect_column_values_to_not_be_null",
    "expect_column_values_to_be_null",
    "expect_column_values_to_be_in_set",
    "expect_column_values_to_not_be_in_set",
    "expect_column_values_to_be_between",
    "expect_column_values_to_match_regex",
    "expect_column_values_to_not_match_regex",
    "expect_column_values_to_be_unique",
    "expect_compound_columns_to_be_unique",
)


class SuiteError(Exception):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Rule:
    """One expectation of a suite, with the severity that decides what its failure does."""

    type: str
    kwargs: dict[str, Any]
    severity: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def columns(self) -> tuple[str, ...]:
        if "column" in self.kwargs:
            return (str(self.kwargs["column"]),)
        return tuple(str(c) for c in self.kwargs.get("column_list") or ())

    @property
    def column(self) -> str:
        return ",".join(self.columns)

    @property
    def name(self) -> str:
        """The rule name users see in messages, the quarantine `rule` column and the reports."""
        return str(self.meta.get("rule") or f"{self.type}({self.column})")

    @property
    def row_level(self) -> bool:
        return self.type in ROW_LEVEL

    def unexpected_sql(self) -> str:
        """Spark SQL predicate, true on the rows GX counts as unexpected (may use a window: select, not where)."""
        k = self.kwargs
        cols = [_ident(c) for c in self.columns]
        c = cols[0] if cols else ""
        if self.type == "expect_column_values_to_not_be_null":
            return f"{c} IS NULL"
        if self.type == "expect_column_values_to_be_null":
            return f"{c} IS NOT NULL"
        if self.type in ("expect_column_values_to_be_in_set", "expect_column_values_to_not_be_in_set"):
            values = ", ".join(_literal(v) for v in k.get("value_set") or [])
            inside = f"{c} IN ({values})" if values else "false"
            wanted = inside if self.type == "expect_column_values_to_be_in_set" else f"NOT ({inside})"
            return f"{c} IS NOT NULL AND NOT ({wanted})"
        if self.type == "expect_column_values_to_be_between":
            bounds = []
            if k.get("min_value") is not None:
                bounds.append(f"{c} {'>' if k.get('strict_min') else '>='} {_literal(k['min_value'])}")
            if k.get("max_value") is not None:
                bounds.append(f"{c} {'<' if k.get('strict_max') else '<='} {_literal(k['max_value'])}")
            return f"{c} IS NOT NULL AND NOT ({' AND '.join(bounds) or 'true'})"
        if self.type in ("expect_column_values_to_match_regex", "expect_column_values_to_not_match_regex"):
            match = f"{c} RLIKE {_literal(k['regex'])}"
            wanted = match if self.type == "expect_column_values_to_match_regex" else f"NOT ({match})"
            return f"{c} IS NOT NULL AND NOT ({wanted})"
        if self.type == "expect_column_values_to_be_unique":
            return f"{c} IS NOT NULL AND count(1) OVER (PARTITION BY {c}) > 1"
        if self.type == "expect_compound_columns_to_be_unique":
            ignore = k.get("ignore_row_if", "all_values_are_missing")
            skip = {
                "all_values_are_missing": " AND ".join(f"{x} IS NULL" for x in cols),
                "any_value_is_missing": " OR ".join(f"{x} IS NULL" for x in cols),
            }.get(ignore, "false")
            return f"NOT ({skip}) AND count(1) OVER (PARTITION BY {', '.join(cols)}) > 1"
        raise ValueError(f"{self.type} is not a row-level expectation")


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    rules: tuple[Rule, ...]
    raw: dict[str, Any]

    def by_severity(self, severity: str) -> list[Rule]:
        return [r for r in self.rules if r.severity == severity]


def suite_path(name: str) -> Path:
    return settings.expectations_dir() / f"{name}.json"


def load_suite(name: str) -> Suite:
    """Read and check one suite; raise SuiteError listing every problem (each naming the file and the fix)."""
    path = suite_path(name)
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(settings.expectations_dir().glob("*.json"))) or "none"
        raise SuiteError(
            [
                f"{path}: no such expectation suite (suites in {settings.expectations_dir()}: {known}). "
                f"Fix: add {path.name} or correct the table's 'expectations:' name"
            ]
        )
    try:
        raw = json.loads(path.read_text())
    except ValueError as exc:
        raise SuiteError([f"{path}: not valid JSON: {exc}"]) from None
    problems: list[str] = []
    if not isinstance(raw, dict) or not isinstance(raw.get("expectations"), list):
        raise SuiteError([f"{path}: expected an object with an 'expectations' list (a GX 1.x suite)"])
    if raw.get("name") != name:
        problems.append(f'{path}: name {raw.get("name")!r} differs from the file name. Fix: set "name": "{name}"')
    rules = []
    for i, item in enumerate(raw["expectations"]):
        where = f"{path}: expectations[{i}]"
        if not isinstance(item, dict) or not str(item.get("type", "")).startswith("expect_"):
            problems.append(f"{where}: needs a 'type' like expect_column_values_to_not_be_null")
            continue
        meta = item.get("meta") or {}
        rule = Rule(str(item["type"]), dict(item.get("kwargs") or {}), str(meta.get("severity")), dict(meta))
        problems += rule_problems(f"{where} ({rule.name})", rule, meta.get("severity"))
        rules.append(rule)
    names = [r.name for r in rules]
    for duplicate in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{path}: two expectations are both named {duplicate!r}. Fix: give one a meta.rule name")
    if problems:
        raise SuiteError(problems)
    return Suite(name, path, tuple(rules), raw)


def rule_problems(where: str, rule: Rule, severity: Any) -> list[str]:
    """What is wrong with one expectation's severity and columns (`severity` as the suite spells it)."""
    problems = []
    if severity not in SEVERITIES:
        problems.append(
            f"{where}: meta.severity is {severity!r}. Fix: set meta.severity to one of {', '.join(SEVERITIES)}"
        )
    elif severity == "drop" and not rule.row_level:
        problems.append(
            f"{where}: only row-level expectations can drop rows. Fix: use fail or warn, or one of {', '.join(ROW_LEVEL)}"
        )
    elif severity == "drop" and rule.kwargs.get("mostly") is not None:
        problems.append(
            f"{where}: 'mostly' makes no sense for a drop rule (every failing row is dropped). Fix: remove 'mostly'"
        )
    if rule.row_level and not rule.columns:
        problems.append(f"{where}: kwargs need 'column' (or 'column_list')")
    return problems


def check_suite(name: str) -> list[str]:
    """Problems of one suite (empty when fine): what `millpond validate` and the spec loader report."""
    try:
        load_suite(name)
    except SuiteError as exc:
        return exc.problems
    return []


def _ident(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
