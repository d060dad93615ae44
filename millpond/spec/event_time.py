"""Whether a SQL transform passes the event-time column through as it read it, read from the SQL alone.

A reprocess slices every table by the source's event-time column (millpond.spec.reprocess): the rows of an
interval in silver are recomputed from the rows of that interval upstream. That holds only if the transform keeps
the column's value: one that truncates it or shifts its time zone moves rows across the interval's bounds, and the
slice would delete rows it never rebuilds. The SQL is parsed with sqlglot (Spark dialect) and the column followed
from the outer SELECT through CTEs, subqueries and set operations back to the view `source`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlglot import exp

# Imported inside functions: sqlglot only for a spec with a SQL transform: the spec loader runs at every DAG parse.

SOURCE_VIEW = "source"  # the view a SQL transform reads (millpond.driver.plan.apply_transform)


@dataclass(frozen=True)
class Verdict:
    """kept: the column comes out as `source` holds it; rewritten/dropped: it does not (`detail` says how);
    unknown: the SQL could not be followed (`detail` says why), so a reprocess checks the rows instead."""

    outcome: str  # kept | rewritten | dropped | unknown
    detail: str = ""


KEPT = Verdict("kept")


def follow(sql: str, column: str) -> Verdict:
    """How the SQL transform treats `column` (names compare case-insensitively, as Spark resolves them). Never
    raises: SQL it cannot follow is `unknown`, and the reprocess checks the rows (a spec must load, and a DAG file
    parse, whatever sqlglot makes of a query Spark accepts)."""
    import sqlglot  # here, not at the top: the spec loader runs at every DAG parse, and few specs have SQL
    from sqlglot import exp

    try:
        query = sqlglot.parse_one(sql, read="spark")
        if not isinstance(query, exp.Query):
            return Verdict("unknown", "it is not a query")
        return _trace(query, column.lower(), {})
    except Exception as exc:  # sqlglot's parse errors, and anything its tree holds that the walk does not expect
        return Verdict("unknown", f"its SQL could not be followed here ({(str(exc) or type(exc).__name__)[:200]})")


def _trace(query: exp.Expr, name: str, ctes: dict[str, exp.Expr | None]) -> Verdict:
    from sqlglot import exp

    if isinstance(query, exp.Subquery):
        return _trace(query.this, name, ctes)
    if isinstance(query, exp.SetOperation):
        return _trace_set_operation(query, name, ctes)
    if not isinstance(query, exp.Select):
        return Verdict("unknown", f"its {type(query).__name__} could not be followed")
    for cte in (query.args.get("with_") or exp.With()).expressions:
        renamed = cte.args.get("alias") is not None and cte.args["alias"].args.get("columns")
        ctes = {**ctes, cte.alias.lower(): None if renamed else cte.this}  # None: renames its columns by position
    named = [e for e in query.selects if not _is_star(e) and e.alias_or_name.lower() == name]
    if len(named) > 1:
        return Verdict("rewritten", "it is selected twice: " + ", ".join(e.sql("spark") for e in named))
    if named:
        selected = named[0].this if isinstance(named[0], exp.Alias) else named[0]
        if not isinstance(selected, exp.Column) or selected.name.lower() != name:
            return Verdict("rewritten", named[0].sql("spark"))
        return _from_relation(query, selected.table.lower(), name, ctes)
    for star in (e for e in query.selects if _is_star(e)):
        changed = _changed_by_star(star, name)
        if changed:
            return changed
        return _from_relation(query, star.table.lower() if isinstance(star, exp.Column) else "", name, ctes)
    return Verdict("dropped", "the SELECT list does not name it")


def _trace_set_operation(query: exp.SetOperation, name: str, ctes: dict[str, exp.Expr | None]) -> Verdict:
    """A UNION (EXCEPT, INTERSECT) takes its names from the left side and matches the right side by position: the
    column is kept only if the right side's expression at its position is the column itself."""
    from sqlglot import exp

    left, right = query.left, query.right
    verdict = _trace(left, name, ctes)
    if verdict != KEPT:
        return verdict
    if not isinstance(left, exp.Select) or not isinstance(right, exp.Select):
        return Verdict("unknown", "a set operation of more than two queries")
    position = next((i for i, e in enumerate(left.selects) if e.alias_or_name.lower() == name), None)
    if position is None or any(_is_star(e) for e in left.selects[:position] + right.selects[: position + 1]):
        return Verdict("unknown", "a set operation over * matches columns by position")
    if position >= len(right.selects):
        return Verdict("unknown", "the sides of the set operation have different widths")
    there = right.selects[position]
    inner = there.this if isinstance(there, exp.Alias) else there
    if not isinstance(inner, exp.Column) or inner.name.lower() != name:
        return Verdict("rewritten", f"{there.sql('spark')} fills it by position in the {query.key.upper()}")
    return _from_relation(right, inner.table.lower(), name, ctes)


def _from_relation(query: exp.Select, qualifier: str, name: str, ctes: dict[str, exp.Expr | None]) -> Verdict:
    """Follow the column into the relation the SELECT reads it from (one FROM, no JOIN, no column alias list that
    renames by position: else unknown)."""
    from sqlglot import exp

    source = query.args.get("from_")
    if source is None or query.args.get("joins"):
        return Verdict("unknown", "it reads no single relation (a JOIN, or no FROM)")
    relation = source.this
    renamed = relation.args.get("alias")
    if renamed is not None and renamed.args.get("columns"):
        return Verdict("unknown", f"{relation.sql('spark')} renames columns by position")
    alias = relation.alias_or_name.lower()
    if qualifier and qualifier != alias:
        return Verdict("unknown", f"its qualifier {qualifier!r} names no relation of the FROM")
    if isinstance(relation, exp.Subquery):
        return _trace(relation.this, name, ctes)
    if isinstance(relation, exp.Table):
        table = relation.name.lower()
        if table in ctes:
            body = ctes[table]
            if body is None:
                return Verdict("unknown", f"the CTE {table} renames its columns by position")
            return _trace(body, name, {k: v for k, v in ctes.items() if k != table})
        if table == SOURCE_VIEW and not relation.db:
            return KEPT
        return Verdict("unknown", f"it reads {relation.sql('spark')}, not the view {SOURCE_VIEW}")
    return Verdict("unknown", f"its FROM {relation.sql('spark')} could not be followed")


def _is_star(expression: exp.Expr) -> bool:
    from sqlglot import exp

    return isinstance(expression, exp.Star) or (isinstance(expression, exp.Column) and expression.is_star)


def _changed_by_star(star: exp.Expr, name: str) -> Verdict | None:
    """What a `* EXCEPT (...)`, `* REPLACE (...)` or `* RENAME (...)` does to the column (None: nothing)."""
    from sqlglot import exp

    target = star.this if isinstance(star, exp.Column) and isinstance(star.this, exp.Star) else star
    if name in {c.alias_or_name.lower() for c in target.args.get("except_") or []}:
        return Verdict("dropped", f"{star.sql('spark')} leaves it out")
    if name in {c.alias_or_name.lower() for c in target.args.get("replace") or []}:
        return Verdict("rewritten", star.sql("spark"))
    if name in {c.this.name.lower() for c in target.args.get("rename") or [] if isinstance(c, exp.Alias)}:
        return Verdict("dropped", f"{star.sql('spark')} renames it")
    return None
