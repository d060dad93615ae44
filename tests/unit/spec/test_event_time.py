"""A SQL transform's treatment of the event-time column a reprocess slices by, read from the SQL alone."""

from __future__ import annotations

import pytest

from millpond.spec.event_time import follow

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM source WHERE Device IS NOT NULL",
        "SELECT Device, recorded_at FROM source",  # Spark resolves names case-insensitively
        "SELECT Device, source.`Recorded_At` AS recorded_at FROM source",
        "SELECT t.* FROM source t",
        "WITH s AS (SELECT *, 1 AS k FROM source) SELECT s.* FROM s",
        "SELECT a, Recorded_At FROM (SELECT * FROM source) t UNION ALL SELECT a, Recorded_At FROM source",
        "SELECT Recorded_At, count(*) AS n FROM source GROUP BY Recorded_At",
    ],
)
def test_a_transform_that_passes_the_column_through_keeps_it(sql):
    assert follow(sql, "Recorded_At").outcome == "kept"


@pytest.mark.parametrize(
    ("sql", "shown"),
    [
        ("SELECT a, date_trunc('hour', Recorded_At) AS Recorded_At FROM source", "DATE_TRUNC('HOUR', Recorded_At)"),
        ("SELECT *, Recorded_At + INTERVAL 1 HOUR AS Recorded_At FROM source", "INTERVAL '1' HOUR AS Recorded_At"),
        ("SELECT x AS Recorded_At, Recorded_At AS original FROM source", "x AS Recorded_At"),
        (
            "WITH s AS (SELECT x, from_utc_timestamp(Recorded_At, 'CET') AS Recorded_At FROM source) SELECT * FROM s",
            "FROM_UTC_TIMESTAMP(",
        ),
        (
            "SELECT a, Recorded_At FROM source UNION ALL SELECT a, Recorded_At - INTERVAL 1 DAY AS Recorded_At "
            "FROM source",
            "INTERVAL '1' DAY",
        ),
        ("SELECT * REPLACE (date_trunc('hour', Recorded_At) AS Recorded_At) FROM source", "REPLACE"),
        # A UNION matches its right side by position: the right side's `a` lands in Recorded_At.
        ("SELECT a, Recorded_At FROM source UNION ALL SELECT Recorded_At, a FROM source", "a fills it by position"),
    ],
)
def test_a_transform_that_computes_the_column_anew_rewrites_it(sql, shown):
    verdict = follow(sql, "Recorded_At")
    assert verdict.outcome == "rewritten" and shown in verdict.detail


@pytest.mark.parametrize(
    "sql",
    ["SELECT Device, Index FROM source", "SELECT * EXCEPT (recorded_at) FROM source"],
)
def test_a_transform_that_leaves_the_column_out_drops_it(sql):
    assert follow(sql, "Recorded_At").outcome == "dropped"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT FROM WHERE",
        "SELECT * FROM source JOIN other USING (a)",
        "SELECT * FROM db.source",
        "SELECT s.* FROM x",
        "SELECT * FROM source AS s(a, Recorded_At)",  # a column alias list renames by position
        "WITH s(a, Recorded_At) AS (SELECT * FROM source) SELECT * FROM s",
        "SELECT * FROM source UNION ALL SELECT * FROM source",
    ],
)
def test_sql_that_cannot_be_followed_is_left_to_the_reprocess_row_check(sql):
    verdict = follow(sql, "Recorded_At")
    assert verdict.outcome == "unknown" and verdict.detail
