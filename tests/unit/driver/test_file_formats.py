"""The spec's landing formats and the reader modules of millpond/driver/file_formats/ name the same formats: a
format `millpond validate` accepts has a reader, and a reader module is a format a spec can name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from millpond.driver import file_formats
from millpond.spec.model import FILE_SOURCE_FORMATS

pytestmark = pytest.mark.unit

SHARED = {"columns"}  # what every reader uses, not a format


def test_every_landing_format_but_json_has_a_reader_module_and_every_module_is_a_format():
    modules = {m.name for m in pkgutil.iter_modules(file_formats.__path__)} - SHARED
    assert modules == set(FILE_SOURCE_FORMATS) - {"json"}
    for name in modules:
        read = importlib.import_module(f"{file_formats.__name__}.{name}").read
        assert list(inspect.signature(read).parameters) == ["reader", "location", "schema", "options", "read_options"]
