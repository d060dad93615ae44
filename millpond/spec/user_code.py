"""The project's own Python that a spec names (`module:function`), found and checked without importing it.

Validation runs user code no more than it starts a JVM: a module is located with importlib and read with `ast`.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

from millpond import settings

_NOT_CALLABLE = (
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
    ast.JoinedStr,
    ast.ListComp,
    ast.DictComp,
    ast.SetComp,
)


def function_problems(reference: str, options: list[str]) -> list[tuple[str, str, str]]:
    """Why `module:function` cannot be called as function(key, rows, state, **options): (field, message, fix).

    Read from the module's source with `ast`, never imported: validation runs user code no more than it starts a
    JVM. A name bound in a way the source cannot tell (an import, a call's result) is given the benefit of the doubt.
    """
    module, name = reference.split(":")
    found = find_module(module)
    if found is None:
        return [("function", f"module {module!r} not found", "put transforms in spark_jobs/transforms/<module>.py")]
    origin = str(found.origin or "")
    if not origin.endswith(".py"):
        return []
    try:  # through the loader: under spark-submit the module sits in the --py-files zip, not in a folder
        get_source = getattr(found.loader, "get_source", None)
        source = get_source(found.name) if get_source else Path(origin).read_text()
        tree = ast.parse(source or "", origin)
    except (OSError, ImportError, SyntaxError, ValueError) as exc:
        return [("function", f"module {module!r} cannot be read ({type(exc).__name__}: {exc})", f"fix {origin}")]
    binding: Any = None
    for node in tree.body:  # the last top-level binding wins, as at import time
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            binding = node
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            binding = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            binding = node.value
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            binding = node
    if binding is None:
        return [
            (
                "function",
                f"{name!r} is not defined in module {module!r} ({origin})",
                f"define 'def {name}(key, rows, state, ...)' there, or fix the name",
            )
        ]
    if isinstance(binding, _NOT_CALLABLE):
        return [
            (
                "function",
                f"{module}.{name} is not callable (a {type(binding).__name__.lower()} value)",
                "point 'function' at a def taking (key, rows, state, **options)",
            )
        ]
    if not isinstance(binding, ast.FunctionDef):
        return []
    return _option_problems(binding, options)


def _option_problems(fn: ast.FunctionDef, options: list[str]) -> list[tuple[str, str, str]]:
    """The spec's options against the def's parameters after (key, rows, state)."""
    args = fn.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if len(positional) < 3 and not args.vararg:
        return [
            (
                "function",
                f"{fn.name}({', '.join(positional)}) does not take (key, rows, state)",
                f"define it as 'def {fn.name}(key, rows, state, ...)'",
            )
        ]
    first_default = len(positional) - len(args.defaults)
    accepted = positional[3:] + [a.arg for a in args.kwonlyargs]
    required = [p for i, p in enumerate(positional) if i >= 3 and i < first_default]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    problems = []
    if not args.kwarg:
        for option in options:
            if option not in accepted:
                problems.append(
                    (
                        f"options.{option}",
                        f"{fn.name} takes no parameter {option!r}",
                        f"use its parameters: {', '.join(accepted) or 'none'}",
                    )
                )
    for parameter in required:
        if parameter not in options:
            problems.append(
                ("options", f"{fn.name} needs the option {parameter!r}", f"add it: options: {{{parameter}: ...}}")
            )
    return problems


def make_project_importable() -> None:
    """Put the project folder on sys.path: a spec names its transforms by module path inside the project (e.g.
    `spark_jobs.transforms.sessions:sessions`), whatever the working directory of the process reading it."""
    root = str(settings.project_root())
    if root not in sys.path:
        sys.path.append(root)


def find_module(module: str) -> Any:
    make_project_importable()
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
