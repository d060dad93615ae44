"""What a reprocess may rebuild, decided from the spec before any lock or JVM: the interval, the layout's folders,
and every table that cannot be rebuilt by interval named with its fix."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from millpond.driver import runner
from millpond.spec import SpecError, load_pipeline
from millpond.spec.reprocess import layout_folders, layout_problem, parse_interval, plan_reprocess
from tests.support import REPO
from tests.unit.spec.test_loader import ACTIVITY, problems_for, write_spec

pytestmark = pytest.mark.unit

HOUR = "2026-11-01T02:00:00Z/2026-11-01T03:00:00Z"


def test_an_interval_is_two_iso_instants_in_order_and_a_bare_one_is_utc():
    interval = parse_interval("2026-11-01T02:00:00+01:00/2026-11-01T03:00:00")
    assert (interval.start, interval.end) == (
        datetime(2026, 11, 1, 1, tzinfo=UTC),
        datetime(2026, 11, 1, 3, tzinfo=UTC),
    )
    assert interval.text == "2026-11-01T01:00:00Z/2026-11-01T03:00:00Z"
    for bad, said in (
        ("2026-11-01T02:00:00Z", "not START/END"),
        ("a/b", "not an ISO-8601 instant"),
        ("2026-11-01T03:00:00Z/2026-11-01T02:00:00Z", "the start is not before the end"),
    ):
        with pytest.raises(SpecError, match=said):
            parse_interval(bad)


def test_an_intervals_text_reads_back_as_the_same_interval_to_the_microsecond():
    """The pending record keeps the interval as text; a later run parses it again (a truncated sub-second interval
    read back as start == end, refused, and every later run exited 2)."""
    for text in (
        "2026-11-01T02:00:00.250Z/2026-11-01T02:00:00.750Z",
        "2026-11-01T02:00:00.000001Z/2026-11-01T02:00:01Z",
        "2026-11-01T02:59:59.999999+01:00/2026-11-01T03:00:00+01:00",
        HOUR,
    ):
        interval = parse_interval(text)
        assert parse_interval(interval.text) == interval
    assert parse_interval(HOUR).text == HOUR
    assert parse_interval("2026-11-01T02:00:00.25Z/2026-11-01T03:00:00Z").text == (
        "2026-11-01T02:00:00.250000Z/2026-11-01T03:00:00Z"
    )


def test_a_layout_maps_an_interval_to_its_folders():
    hour = parse_interval(HOUR)
    assert layout_folders("date=YYYY-MM-DD/hour=HH", hour) == ["date=2026-11-01/hour=02"]
    day = parse_interval("2026-11-01T00:00:00Z/2026-11-02T00:00:00Z")
    assert layout_folders("date=YYYY-MM-DD/hour=HH/", day) == [f"date=2026-11-01/hour={h:02d}" for h in range(24)]
    assert layout_folders("YYYY/MM/DD", parse_interval("2026-11-30T22:00:00Z/2026-12-01T01:00:00Z")) == [
        "2026/11/30",
        "2026/12/01",
    ]
    assert layout_problem("date=YYYY-MM-DD/hour=HH") is None
    assert "names no time token" in layout_problem("daily/files")
    assert "has DD but not MM" in layout_problem("YYYY/DD")


def test_the_example_plans_slices_for_bronze_and_silver_and_rebuilds_for_gold():
    pipeline = load_pipeline(REPO / "pipelines" / "activity.yaml")
    plan = plan_reprocess(pipeline, list(pipeline.tables), parse_interval(HOUR))
    assert plan.slices == {"bronze.activity": "Recorded_At", "silver.activity": "Recorded_At"}
    assert plan.rebuilds == ("gold.device_counts", "gold.activity_hourly")


def test_tables_that_cannot_be_rebuilt_by_interval_are_named_with_the_fix(tmp_path):
    clicks = load_pipeline(REPO / "pipelines" / "clicks.yaml")
    with pytest.raises(SpecError) as caught:
        plan_reprocess(clicks, list(clicks.tables), parse_interval(HOUR))
    text = str(caught.value)
    assert "bronze.impressions cannot be reprocessed: its source has no event time (add 'event_time: " in text
    assert "silver.impression_clicks cannot be reprocessed: its state (a join's buffer" in text
    assert "Fix: rebuild it whole with --full-refresh" in text

    spec = copy.deepcopy(ACTIVITY)
    spec["tables"]["silver.activity"]["dedup"]["keys"] = ["Device", "Index"]
    pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
    with pytest.raises(SpecError, match="dedup keys \\['Device', 'Index'\\] leave out the event time 'Recorded_At'"):
        plan_reprocess(pipeline, list(pipeline.tables), parse_interval(HOUR))
    # Bronze alone would leave silver (which cannot follow) reading a replaced slice: refused too.
    with pytest.raises(SpecError, match="silver.activity reads a table this reprocess replaces"):
        plan_reprocess(pipeline, ["bronze.activity"], parse_interval(HOUR))


def test_a_transform_rewriting_the_event_time_is_refused_and_one_dropping_it_cannot_be_reprocessed(tmp_path):
    """A slice of silver is recomputed from bronze's rows of the interval: a transform that moves rows across the
    interval's bounds (truncating or shifting the time) would make a reprocess delete rows it never rebuilds."""

    def silver_sql(sql):
        return lambda s: s["tables"]["silver.activity"]["transform"].update(sql=sql)

    text = problems_for(
        tmp_path, silver_sql("SELECT Device, Index, date_trunc('hour', Recorded_At) AS Recorded_At FROM source")
    )
    assert "tables.silver.activity.transform.sql: it rewrites the event-time column 'Recorded_At'" in text
    assert "DATE_TRUNC('HOUR', Recorded_At) AS Recorded_At" in text
    assert "Fix: keep Recorded_At as it is read" in text

    spec = copy.deepcopy(ACTIVITY)
    silver_sql("SELECT Device, Index, x FROM source")(spec)
    spec["tables"]["silver.activity"].pop("dedup")
    spec["tables"]["silver.activity"].pop("watermark")
    spec["tables"]["silver.activity"]["keys"] = ["Device", "Index"]
    pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")  # valid: nothing rewritten
    with pytest.raises(
        SpecError, match="silver.activity cannot be reprocessed: its SQL transform drops the event-time"
    ):
        plan_reprocess(pipeline, list(pipeline.tables), parse_interval(HOUR))


def test_the_spec_checks_event_time_and_layout_where_they_are_written(tmp_path):
    def source(change):
        return lambda s: s["sources"]["activity"].update(change)

    text = problems_for(tmp_path, source({"event_time": "Recorded"}))
    assert "sources.activity.event_time: 'Recorded' is not a column of the source's schema" in text
    assert "did you mean 'Recorded_At'" in text
    assert "is STRING, not TIMESTAMP" in problems_for(tmp_path, source({"event_time": "Device"}))
    assert "names no time token" in problems_for(tmp_path, source({"layout": "by-hour"}))
    spec = copy.deepcopy(ACTIVITY)
    spec["sources"]["activity"]["event_time"] = "recorded_at"  # Spark resolves names case-insensitively
    pipeline = load_pipeline(write_spec(tmp_path, spec), lake_root=tmp_path / "lake")
    assert pipeline.sources["landing.activity"].event_time == "Recorded_At"  # as the schema (and raw JSON) spell it
    text = problems_for(
        tmp_path,
        lambda s: s["sources"]["activity"].pop("event_time") and s["sources"]["activity"].update({"layout": "YYYY"}),
    )
    assert "a layout maps event time to folders, so it needs the source's event_time" in text
    assert "reprocess_schedule: 'often' is not a schedule" in problems_for(
        tmp_path, lambda s: s.update(reprocess_schedule="often")
    )


def test_reprocess_arguments_are_refused_before_the_lock_and_the_jvm(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    assert runner.main(["activity", "--reprocess", "yesterday"]) == 2
    assert "--reprocess 'yesterday': not START/END" in capsys.readouterr().err
    assert runner.main(["activity", "--reprocess", HOUR, "--full-refresh", "gold.device_counts"]) == 2
    assert "choose one" in capsys.readouterr().err
    assert runner.main(["clicks", "--reprocess", HOUR]) == 2
    assert "cannot be reprocessed" in capsys.readouterr().err
    assert not (tmp_path / "lake" / "_system" / "locks").exists()
