"""The package's layers import one way (README "Layout"): a module imports only from its own layer or those below.

    settings -> spec -> lake -> runs -> engine -> airflow, dev, project -> cli

Imports under `if TYPE_CHECKING:` are annotations only and never run, so they are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import millpond

pytestmark = pytest.mark.unit

PACKAGE = Path(millpond.__file__).resolve().parent
RANK = {"settings": 0, "spec": 1, "lake": 2, "runs": 3, "engine": 4, "airflow": 5, "dev": 5, "project": 5, "cli": 6}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "millpond" and len(parts) > 1 else None


def runtime_imports(tree: ast.Module) -> list[tuple[int, str]]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(child) for child in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "millpond" else [node.module]
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = layer("millpond." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        if own not in RANK:
            continue
        for line, module in runtime_imports(ast.parse(path.read_text())):
            other = layer(module)
            if other in RANK and RANK[other] > RANK[own]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} ({own} -> {other})")
    assert upward == []
    assert len(list(PACKAGE.rglob("*.py"))) > 50  # the walk really read the package
