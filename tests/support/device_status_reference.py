"""The device_status tables computed another way: plain Python over the messages a test sent, no Spark.

`Feed` records every message it produces (partition and offset included, so no one asks Kafka), and each table's
reference is recomputed from that record alone: bronze and its quarantine from the raw values, silver from the
gate's rules, the latest status per device by the greatest event time, sessions by splitting
each device's kept events at gaps over 30 minutes, with the watermark each run of the sessions table started with
dropping late events, and the alerts as a multiset.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 11, 1, tzinfo=UTC)
PARTITIONS = 2
GAP, DELAY = 30, 10  # minutes: the sessions' gap and the watermark delay of gold.device_sessions
LOW_BATTERY = 15
STATUSES = {"ok", "warning", "error", "offline"}
ISO = "%Y-%m-%dT%H:%M:%S.000Z"

# A round: events (minute after T0, device, status, battery) and raw values, produced in this order. A device's
# events share one partition (the key is the device), so its out-of-order events reach Spark out of order.
NOT_JSON = b"not json"
WRONG_TYPE = json.dumps(
    {"device_id": "d1", "event_time": "2026-11-01T00:07:00.000Z", "status": "ok", "battery": "full"}
).encode()
NO_DEVICE = json.dumps({"event_time": "2026-11-01T00:09:00.000Z", "status": "error", "battery": 50.0}).encode()
ROUNDS = [
    [
        (0, "d1", "ok", 90.0),
        (12, "d1", "warning", 40.0),
        (5, "d1", "ok", 88.0),  # 5 after 12: d1's newest is 12
        (3, "d2", "ok", 70.0),
        (20, "d2", "error", 65.0),  # an alert
        (22, "d2", "rebooting", 60.0),  # unknown status: the gate sets it aside (it would be d2's newest)
        NOT_JSON,
        WRONG_TYPE,  # bronze quarantine
        (30, "d3", "ok", 50.0),
        (25, "d3", "ok", 55.0),
        (50, "d3", "ok", 140.0),  # battery out of range: set aside (it would be d3's newest, and move the watermark)
        (40, "d4", "ok", 12.0),
    ],  # low battery: an alert. Watermark none -> 30
    [
        (28, "d2", "warning", 60.0),  # at or before W 30: late for sessions, still d2's newest status
        (35, "d3", "ok", 48.0),
        (33, "d3", "error", 47.0),  # 33 after 35: an alert, d3's newest stays 35
        (45, "d1", "ok", 86.0),  # 33 minutes after d1's 12: a new session; 0-12 is final at W 70
        NO_DEVICE,  # bronze keeps it, silver's filter drops it
        (80, "d5", "ok", 99.0),
    ],  # W 30 -> 70; d4 went quiet at 40: 40 + gap = 70 is not past W 70, still open
    [
        (75, "d1", "error", 30.0),  # an alert; 30 after d1's 45: same session
        (110, "d5", "ok", 14.0),
    ],  # an alert; W 70 -> 100 closes d4's session by the timeout
]


def partition_of(device: str | None) -> int:
    return int(device[1:]) % PARTITIONS if device else 0


def stamp(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).strftime(ISO)


def minutes(ts: datetime) -> int:
    return int((ts.replace(tzinfo=UTC) - T0).total_seconds()) // 60


class Feed:
    """What was sent to the events topic, message by message, and every reference computed from it."""

    def __init__(self, topic: str):
        self.topic = topic
        self.sent: list[tuple[int, int, str | None, bytes]] = []  # (partition, offset, key, value)
        self.next_offset = [0] * PARTITIONS
        self.runs: list[list[tuple]] = []  # the silver events each run of the sessions table read

    def send(self, spark, bootstrap: str, items: list) -> None:
        """Produce a round (events and raw values) in list order; the messages of one run of the pipeline."""
        from millpond.dev.kafka_broker import produce

        messages = []
        for item in items:
            if isinstance(item, bytes):
                key, value = None, item
            else:
                minute, device, status, battery = item
                key, value = (
                    device,
                    json.dumps(
                        {"device_id": device, "event_time": stamp(minute), "status": status, "battery": battery}
                    ).encode(),
                )
            partition = partition_of(key)
            messages.append((partition, key.encode() if key else None, value))
        produce(spark, bootstrap, self.topic, messages)
        offsets_before = {p: self.next_offset[p] for p in range(PARTITIONS)}
        for partition, key, value in messages:
            self.sent.append((partition, self.next_offset[partition], key.decode() if key else None, value))
            self.next_offset[partition] += 1
        new = {(p, o) for p, o, _, _ in self.sent if o >= offsets_before[p]}
        self.runs.append([e for address, e in self.silver().items() if address in new])

    # ------------------------------------------------------------------------------------------ bronze

    def bronze(self) -> dict[tuple, tuple]:
        """(partition, offset) -> (key, device_id, event_time, status, battery) of each well-formed value."""
        rows = {}
        for partition, offset, key, value in self.sent:
            try:
                record = json.loads(value.decode())
            except ValueError:
                continue
            battery = record.get("battery") if isinstance(record, dict) else None
            if isinstance(record, dict) and (battery is None or isinstance(battery, float)):
                rows[(partition, offset)] = (
                    key,
                    record.get("device_id"),
                    record.get("event_time"),
                    record.get("status"),
                    battery,
                )
        return rows

    def bronze_quarantine(self) -> list[str]:
        good = self.bronze()
        return sorted(f"kafka:{self.topic}/{p}/{o}" for p, o, _, _ in self.sent if (p, o) not in good)

    # ------------------------------------------------------------------------------------------ silver

    def gated(self) -> dict[tuple, tuple]:
        """Bronze rows silver's filter keeps (a device and a time), before the gate."""
        return {a: r for a, r in self.bronze().items() if r[1] is not None and r[2] is not None}

    def silver(self) -> dict[tuple, tuple]:
        """(partition, offset) -> (device, minute, status, battery) of each row that passes the gate."""
        return {
            a: (r[1], minutes(datetime.fromisoformat(r[2])), r[3], r[4])
            for a, r in self.gated().items()
            if not self.rules_failed(r)
        }

    def silver_quarantine(self) -> dict[tuple, str]:
        """(partition, offset) -> the drop rules each set-aside row failed, as the quarantine's `rule` says."""
        return {a: "; ".join(self.rules_failed(r)) for a, r in self.gated().items() if self.rules_failed(r)}

    @staticmethod
    def rules_failed(row: tuple) -> list[str]:
        status, battery = row[3], row[4]
        failed = []
        if status is None:
            failed.append("status_present")
        elif status not in STATUSES:
            failed.append("known_status")
        if battery is not None and not 0 <= battery <= 100:
            failed.append("battery_in_range")
        return failed

    def device_status(self) -> dict[str, tuple]:
        """device -> (status, battery, newest minute, events): the greatest event time wins (the rounds have no ties)."""
        by_device = defaultdict(list)
        for (partition, offset), (device, minute, status, battery) in self.silver().items():
            by_device[device].append(((minute, partition, offset), status, battery))
        table = {}
        for device, events in by_device.items():
            (minute, _, _), status, battery = max(events)
            table[device] = (status, battery, minute, len(events))
        return table

    # ------------------------------------------------------------------------------------------ gold

    def sessions(self, runs: list[list[tuple]] | None = None) -> tuple[set[tuple], list[int], int]:
        """(final sessions, late events per run, devices with an open session) after the given runs.

        Each run drops the events at or before the watermark it started with; the watermark then moves to the newest
        event seen minus the delay, and a session is final once its last event + gap is before the watermark.
        """
        watermark, kept, dropped = None, defaultdict(list), []
        for rows in self.runs if runs is None else runs:
            late = [r for r in rows if watermark is not None and r[1] <= watermark]
            for device, minute, _, _ in rows:
                if watermark is None or minute > watermark:
                    kept[device].append(minute)
            dropped.append(len(late))
            if rows:
                newest = max(r[1] for r in rows) - DELAY
                watermark = newest if watermark is None else max(watermark, newest)
        found = []
        for device, times in kept.items():
            current: list[int] = []
            for minute in sorted(times):
                if current and minute - current[-1] > GAP:
                    found.append((device, current[0], current[-1], len(current)))
                    current = []
                current.append(minute)
            found.append((device, current[0], current[-1], len(current)))
        final = {s for s in found if s[2] + GAP < watermark}
        return final, dropped, len({s[0] for s in found if s not in final})

    def alerts(self) -> Counter:
        """(key, device, minute, status, battery) of each silver error or low-battery event, each once."""
        return Counter(
            (d, d, m, s, b)
            for d, m, s, b in self.silver().values()
            if s == "error" or (b is not None and b < LOW_BATTERY)
        )
