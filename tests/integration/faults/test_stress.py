"""The quick version of `make stress`: a few seeded kill cycles, then the tables equal the reference."""

from __future__ import annotations

import pytest

from tests.support.stress import run_stress

pytestmark = pytest.mark.integration


def test_seeded_kill_cycles_leave_the_tables_exact(spark, lake):
    figures = run_stress(lake, cycles=3, seed=7, spark=spark)
    assert figures["mismatches"] == 0, figures["problems"]
    assert figures["kills"] >= 2, figures  # seed 7 draws faults the runs reach: the loop really killed runs
    assert figures["rows_compared"] > 0
