"""millpond changes its own environment, and builds a child's, only in millpond/process_env.py; there every change is
undone when its block ends, raising or not."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import millpond
from millpond import process_env

pytestmark = pytest.mark.unit

PACKAGE = Path(millpond.__file__).resolve().parent
OWNER = PACKAGE / "process_env.py"
WRITES = {"pop", "update", "setdefault", "clear", "popitem", "copy", "__setitem__", "__delitem__"}


def is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os"


def mentions_environ(node: ast.AST) -> bool:
    return any(is_environ(n) for n in ast.walk(node))


def environment_writes(tree: ast.Module) -> list[int]:
    """Lines that set, remove or copy names of os.environ, put or unset them through os, or build a child's
    environment from it."""
    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else []
        if isinstance(node, ast.AugAssign):
            targets = [node.target]
        if any(is_environ(t) or (isinstance(t, ast.Subscript) and is_environ(t.value)) for t in targets):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func
            if (method.attr in WRITES and is_environ(method.value)) or (
                method.attr in ("putenv", "unsetenv") and getattr(method.value, "id", "") == "os"
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(
            k is None and is_environ(v) for k, v in zip(node.keys, node.values, strict=True)
        ):
            lines.append(node.lineno)  # {**os.environ, ...}: a child's environment built by hand
        elif isinstance(node, ast.DictComp) and any(mentions_environ(g.iter) for g in node.generators):
            lines.append(node.lineno)  # {k: v for k, v in os.environ.items() if ...}: the same
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict" and mentions_environ(node):
            lines.append(node.lineno)  # dict(os.environ), dict(**os.environ): the same
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name == "environ" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_process_env_writes_the_environment():
    found = {
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in PACKAGE.rglob("*.py")
        if path != OWNER
        for line in environment_writes(ast.parse(path.read_text(), str(path)))
    }
    assert sorted(found) == []


def test_the_scan_finds_each_kind_of_write():
    source = """
import os
os.environ["A"] = "1"
del os.environ["A"]
os.environ.pop("A", None)
os.environ.update({"A": "1"})
os.putenv("A", "1")
env = {**os.environ, "A": "1"}
from os import environ
env = {k: v for k, v in os.environ.items() if k != "A"}
env = dict(os.environ)
os.environ |= {"A": "1"}
env = dict(**os.environ)
"""
    assert environment_writes(ast.parse(source)) == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    assert environment_writes(ast.parse("import os\nvalue = os.environ.get('A')\nok = 'A' in os.environ\n")) == []


def test_scoped_changes_are_undone_also_when_the_block_raises(monkeypatch):
    monkeypatch.setenv("MILLPOND_TEST_KEPT", "before")
    monkeypatch.delenv("MILLPOND_TEST_ADDED", raising=False)
    with pytest.raises(RuntimeError), process_env.scoped({"MILLPOND_TEST_KEPT": None, "MILLPOND_TEST_ADDED": "new"}):
        assert "MILLPOND_TEST_KEPT" not in os.environ
        assert os.environ["MILLPOND_TEST_ADDED"] == "new"
        raise RuntimeError
    assert os.environ["MILLPOND_TEST_KEPT"] == "before"
    assert "MILLPOND_TEST_ADDED" not in os.environ


def test_a_child_environment_leaves_this_process_unchanged(monkeypatch):
    monkeypatch.setenv("MILLPOND_TEST_KEPT", "before")
    env = process_env.child({"MILLPOND_TEST_KEPT": None, "MILLPOND_TEST_ADDED": "new"})
    assert "MILLPOND_TEST_KEPT" not in env and env["MILLPOND_TEST_ADDED"] == "new"
    assert env["PATH"] == os.environ["PATH"]
    assert os.environ["MILLPOND_TEST_KEPT"] == "before" and "MILLPOND_TEST_ADDED" not in os.environ


def test_a_served_run_takes_its_settings_whole(monkeypatch):
    """The engine's Python worker serves batch after batch: a setting the previous run had and this one has not
    (a fault point) is gone, others stay."""
    monkeypatch.setenv("MILLPOND_FAULT", "silver.activity:before_write")
    monkeypatch.setenv("MILLPOND_LAKE", "/old")
    monkeypatch.setenv("NOT_MILLPOND", "kept")
    settings = {k: v for k, v in os.environ.items() if k.startswith("MILLPOND_") and k not in ("MILLPOND_FAULT",)}
    process_env.replace_with_prefix("MILLPOND_", {**settings, "MILLPOND_LAKE": "/new"})
    assert "MILLPOND_FAULT" not in os.environ
    assert os.environ["MILLPOND_LAKE"] == "/new" and os.environ["NOT_MILLPOND"] == "kept"
