"""Sample data lands atomically and continues the feed where the last round stopped."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta

import pytest

from millpond import cli
from millpond.dev.sample_data import activity_files, device_events

pytestmark = pytest.mark.unit


def test_files_land_complete_under_final_names_only(tmp_path):
    landed = activity_files(tmp_path, files=3, rows=50, seed=1)
    assert [p.name for p in landed] == ["activity-000000.json", "activity-000001.json", "activity-000002.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in landed]  # no temp files left
    records = [json.loads(line) for line in landed[0].read_text().splitlines()]
    assert len(records) == 50
    assert set(records[0]) == {"Recorded_At", "Device", "Index", "Model", "User", "gt", "x", "y", "z"}


def test_next_round_continues_numbering_and_event_time(tmp_path):
    activity_files(tmp_path, files=2, rows=20, seed=1)
    second = activity_files(tmp_path, files=1, rows=20, seed=2)
    assert second[0].name == "activity-000002.json"
    first_times = [json.loads(x)["Recorded_At"] for x in (tmp_path / "activity-000001.json").read_text().splitlines()]
    later_times = [json.loads(x)["Recorded_At"] for x in second[0].read_text().splitlines()]
    assert min(later_times) > max(first_times)


def test_duplicates_and_malformed_rates_are_applied(tmp_path):
    landed = activity_files(tmp_path, files=1, rows=2000, duplicates=0.1, malformed=0.05, seed=3)
    lines = landed[0].read_text().splitlines()
    assert 0.05 < 1 - len(set(lines)) / len(lines) < 0.15

    def parses(line):
        try:
            return isinstance(json.loads(line), dict) and not isinstance(json.loads(line).get("x", 0.0), str)
        except ValueError:
            return False

    bad = sum(not parses(line) for line in lines)
    assert 40 < bad < 160


def test_clicks_rounds_land_impressions_and_the_clicks_on_them(tmp_path):
    from millpond.dev.sample_data import clicks_files

    impressions, clicks = tmp_path / "impressions", tmp_path / "clicks"
    first = clicks_files(impressions, clicks, files=2, rows=500, seed=1)
    second = clicks_files(impressions, clicks, files=1, rows=500, seed=2)
    assert [p.name for p in first + second] == [
        "impressions-000000.json",
        "clicks-000000.json",
        "impressions-000001.json",
        "clicks-000001.json",
        "impressions-000002.json",
        "clicks-000002.json",
    ]
    assert not [p for p in tmp_path.rglob(".*")]  # no temp files left

    def records(path):
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def time(text):
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    for k in range(3):
        shown = {r["impression_id"]: r for r in records(impressions / f"impressions-{k:06d}.json")}
        clicked = records(clicks / f"clicks-{k:06d}.json")
        assert len(shown) == 500 and 0.2 < len(clicked) / 500 < 0.4  # about 30 % clicked, each once at most
        assert len({c["impression_id"] for c in clicked}) == len(clicked)
        lags = [
            (time(c["click_time"]) - time(shown[c["impression_id"]]["impression_time"])).total_seconds() / 60
            for c in clicked
        ]  # every click is on an impression of its own round
        assert all(0 <= lag <= 50 or 61 <= lag <= 90 for lag in lags)
        assert 0 < sum(lag > 60 for lag in lags) < len(lags) * 0.25  # about one in ten out of the join's range
        hours = {time(r["impression_time"]).hour for r in shown.values()}
        assert hours == {k}  # round k is hour k: event time continues from the rounds already landed


def test_device_events_report_once_a_minute_with_late_malformed_and_unknown_ones():
    start = datetime(2026, 11, 1, 5, tzinfo=UTC)
    messages = device_events(start, hours=2, rows=300, malformed=0.05, seed=3)
    events, bad = [], 0
    for key, value in messages:
        try:
            event = json.loads(value)
        except ValueError:
            bad += 1
            continue
        if not isinstance(event, dict) or not isinstance(event["battery"], float):
            bad += 1
            continue
        assert key == event["device_id"]  # keyed by device: one partition per device
        events.append((datetime.fromisoformat(event["event_time"]), event))
    assert 0.02 < bad / len(messages) < 0.09  # about --malformed of them
    times = [(e["device_id"], t) for t, e in events]
    assert len(set(times)) == len(times) and all(
        t.second == 0 and start <= t < start + timedelta(hours=2) for _, t in times
    )  # at most once a minute, on the minute
    late = sum(later < earlier for (earlier, _), (later, _) in zip(events, events[1:], strict=False))
    assert 0 < late < len(events) * 0.15  # about one in twenty sent after younger events
    assert {e["status"] for _, e in events} >= {"ok", "warning", "rebooting"}  # rebooting: the gate sets it aside
    assert all(0 <= e["battery"] <= 100 for _, e in events)
    assert device_events(start, 2, 300, 0.05, seed=3) == messages  # seeded: the same feed again


def test_generate_device_status_without_a_broker_stops_before_spark(tmp_path, monkeypatch, capsys):
    """No JVM is started for an address that is unset or where nothing listens: the message names the fix."""
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    monkeypatch.delenv("MILLPOND_KAFKA_BOOTSTRAP", raising=False)
    assert cli.main(["generate", "device_status"]) == 2
    assert "environment variable MILLPOND_KAFKA_BOOTSTRAP is not set" in capsys.readouterr().err
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
        monkeypatch.setenv("MILLPOND_KAFKA_BOOTSTRAP", address)
        assert cli.main(["generate", "device_status"]) == 2
    err = capsys.readouterr().err
    assert f"sources.device_events.bootstrap_servers: no Kafka broker answers on {address}" in err
    assert "Fix: start the broker (on this machine: make kafka-up)" in err


def test_a_customers_feed_is_debezium_shaped_out_of_order_late_and_continues_its_log(tmp_path):
    from millpond.dev.sample_data import customer_change_files

    first = customer_change_files(tmp_path, files=2, rows=200, duplicates=0.05, seed=3)
    second = customer_change_files(tmp_path, files=1, rows=200, seed=4)
    assert [p.name for p in first + second] == [f"changes-00000{k}.json" for k in range(3)]
    files = [[json.loads(line) for line in p.read_text().splitlines()] for p in first + second]
    for envelope in (e for f in files for e in f):
        assert envelope["op"] in ("c", "u", "d")
        assert (envelope["before"] is None) == (envelope["op"] == "c")
        assert (envelope["after"] is None) == (envelope["op"] == "d")
    lsns = [[e["source"]["lsn"] for e in f] for f in files]
    assert lsns[0] != sorted(lsns[0])  # delivered out of log order
    assert max(lsns[0]) > min(lsns[1])  # some changes of the first file's log arrive in the second (late)
    assert len(lsns[0]) + len(lsns[1]) > len(set(lsns[0]) | set(lsns[1])) > 0  # some delivered twice
    assert min(lsns[2]) > max(lsns[0] + lsns[1])  # the next call continues the log after the landed files
    inserted_before = {e["after"]["id"] for f in files[:2] for e in f if e["op"] == "c"}
    changed_now = {(e["after"] or e["before"])["id"] for e in files[2] if e["op"] in ("u", "d")}
    assert changed_now & inserted_before  # ... and the database: it updates and deletes the customers landed before
    assert {e["op"] for f in files for e in f} == {"c", "u", "d"}
