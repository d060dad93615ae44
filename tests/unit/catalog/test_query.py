"""`millpond sql`'s three outputs: what a person reads and what a script parses back."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from decimal import Decimal

import pytest

from millpond.catalog.query import render

pytestmark = pytest.mark.unit

COLUMNS = ["device", "n", "at", "note"]
ROWS = [("nexus4_1", 12, datetime(2026, 11, 29, 15, 0), None), ("s3, mini", 3, None, 'say "hi"\nbye')]


def test_csv_has_a_header_and_reads_back_with_the_csv_module():
    parsed = list(csv.reader(io.StringIO(render(COLUMNS, ROWS, "csv"))))
    assert parsed == [COLUMNS, ["nexus4_1", "12", "2026-11-29 15:00:00", ""], ["s3, mini", "3", "", 'say "hi"\nbye']]


def test_json_is_an_array_of_objects_with_typed_values():
    rows = [*ROWS, ("x", 1, None, {"a": [Decimal("1.50")]}), ("y", float("nan"), None, b"\x01\xff")]
    parsed = json.loads(render(COLUMNS, rows, "json"), parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert parsed[0] == {"device": "nexus4_1", "n": 12, "at": "2026-11-29T15:00:00", "note": None}
    assert parsed[2]["note"] == {"a": ["1.50"]}
    assert (parsed[3]["n"], parsed[3]["note"]) == ("nan", "01ff")


def test_table_aligns_columns_shows_nulls_and_counts_rows():
    lines = render(COLUMNS, ROWS[:1], "table").splitlines()
    assert lines[0].split(" | ") == ["device  ", "n ", "at                 ", "note"]
    assert set(lines[1]) <= {"-", "+"}
    assert lines[2].endswith("| NULL") and lines[-1] == "(1 row)"
    assert render(COLUMNS, [], "table").splitlines()[-1] == "(0 rows)"
