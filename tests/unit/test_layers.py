"""The package's layers import one way (README "Layout"): a module imports only from its own layer or those below,
and no modules import each other in a circle.

    settings, process_env -> spec -> lake -> runs -> driver, catalog -> airflow, dev, project -> cli

Every import counts, a function's own and those under `if TYPE_CHECKING:` too: an annotation that names a module
above, or one that closes a circle, is a dependency all the same, only hidden (a type two layers need lives in the
lower one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import millpond

pytestmark = pytest.mark.unit

PACKAGE = Path(millpond.__file__).resolve().parent
RANK = {
    "settings": 0,
    "process_env": 0,
    "spec": 1,
    "lake": 2,
    "runs": 3,
    "driver": 4,
    "airflow": 5,
    "dev": 5,
    "project": 5,
    "catalog": 4,
    "cli": 6,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "millpond" and len(parts) > 1 else None


def imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, imported name) of every absolute import; `from millpond.x import y` as `millpond.x.y`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def imported_module(name: str) -> str | None:
    """The millpond module an imported name lives in (a name imported from a module is that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for module, path in MODULES.items():
        own = layer(module)
        if own not in RANK:
            continue
        for line, name in imports(ast.parse(path.read_text())):
            other = layer(name)
            if other in RANK and RANK[other] > RANK[own]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name} ({own} -> {other})")
    assert upward == []
    assert len(MODULES) > 50  # the walk really read the package


def test_no_modules_import_each_other_in_a_circle():
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = {imported_module(name) for _, name in imports(ast.parse(path.read_text()))}
        graph[module] = {t for t in targets if t and t != module and t != "millpond"}
    assert circles(graph) == []
    assert sum(len(targets) for targets in graph.values()) > 100  # the walk found the package's imports


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that reach one another through imports (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_circles_finds_a_circle_of_three_and_nothing_in_a_chain():
    """The check above can fail: a circle through three modules is found, a chain and a self-import are not."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set(), "e": {"e"}}) == []


# Functions longer than LONGEST lines (their body, docstring left out), each with its reason. A new one fails the test
# below: split it, or add it here with a reason a reviewer would accept.
LONGEST = 60
LONG_FUNCTIONS = {
    "millpond/cli.py:main": "the command line's parser, one add_argument per option, read top to bottom",
}


def body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = function.body
    has_docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1
    first = body[1] if has_docstring else body[0]
    return (function.end_lineno or first.lineno) - first.lineno + 1


def test_no_function_is_longer_than_60_lines_without_a_reason():
    long = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and body_lines(node) > LONGEST:
                long[f"{path.relative_to(PACKAGE.parent)}:{node.name}"] = body_lines(node)
    assert {name: lines for name, lines in long.items() if name not in LONG_FUNCTIONS} == {}
    assert sorted(set(LONG_FUNCTIONS) - set(long)) == []  # a function split since leaves the list too


REASON_MARK = "# Imported inside functions:"


def imports_without_reason(path: Path) -> list[int]:
    """Lines of imports inside a function with no comment on their line or the line above."""
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom) and not (
                    "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
                ):
                    found.append(node.lineno)
    return sorted(set(found))


def test_imports_inside_functions_say_why():
    """An import inside a function is for a costly or unwanted module (Great Expectations, pyspark at DAG parse):
    its module says why once (`# Imported inside functions: <reason>`), or the import says it on its line; a module
    whose imports all moved to the top loses the note."""
    unexplained, stale = [], []
    for module, path in MODULES.items():
        lazy = imports_without_reason(path)
        noted = REASON_MARK in path.read_text()
        if lazy and not noted:
            unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{lazy}")
        if noted and not lazy:
            stale.append(module)
    assert unexplained == [] and stale == []
