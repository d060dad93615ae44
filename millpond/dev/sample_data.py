"""Realistic sample files for the example pipelines, landed the way producers must land them: atomically.

Each file is written under a hidden temporary name (`.name.tmp`, skipped by Spark's file source) and renamed
when complete. Event times continue from the files already landed, so successive rounds look like a live feed.
"""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

ACTIVITY_EPOCH = datetime(2026, 11, 1, tzinfo=UTC)
ACTIVITIES = ("stand", "sit", "walk", "bike", "stairsup", "stairsdown")
MODELS = ("nexus4", "s3", "samsungold", "gear")
USERS = tuple("abcdefghi")
SECONDS_PER_FILE = 300  # each file covers five minutes of recordings
ADS = tuple(f"ad_{n}" for n in range(1, 6))
IMPRESSION_SECONDS_PER_FILE = 3600  # each clicks-pipeline round covers one hour of impressions
# The clicks pipeline's campaigns dimension: ad -> (campaign, advertiser). ad_5 has no campaign on purpose: the
# left_outer lookup counts its impressions as 'unattributed'.
CAMPAIGNS = {
    "ad_1": ("autumn_sale", "acme"),
    "ad_2": ("autumn_sale", "acme"),
    "ad_3": ("brand_launch", "globex"),
    "ad_4": ("retargeting", "globex"),
}


def land_file(folder: Path, name: str, lines: list[str]) -> Path:
    """Write `lines` to folder/name atomically: hidden temp file, fsync, rename."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    target = folder / name
    os.replace(tmp, target)
    return target


def malformed_line(rng: random.Random, good: str) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return good[: rng.randrange(5, max(6, len(good) - 5))]  # truncated
    if kind == 1:
        return good.replace('"x": ', '"x": "not-a-number", "_x": ', 1)  # wrong type
    if kind == 2:
        return "[1, 2, 3]"  # not an object
    if kind == 3:
        return good.replace('"Index": ', '"Index": "seven", "_i": ', 1)  # wrong type
    return "this is not json"


def activity_files(
    folder: Path,
    files: int,
    rows: int,
    duplicates: float = 0.0,
    malformed: float = 0.0,
    seed: int | None = None,
    start_index: int | None = None,
) -> list[Path]:
    """Land `files` NDJSON files of `rows` lines each into the activity landing folder."""
    existing = sorted(p for p in folder.glob("activity-*.json")) if folder.exists() else []
    first = len(existing) if start_index is None else start_index
    rng = random.Random(seed if seed is not None else first)
    devices = [f"{model}_{n}" for model in MODELS for n in range(1, 4)]
    landed = []
    for k in range(first, first + files):
        start = ACTIVITY_EPOCH + timedelta(seconds=k * SECONDS_PER_FILE)
        lines: list[str] = []
        for i in range(rows):
            if lines and rng.random() < duplicates:
                lines.append(rng.choice(lines[-20:]))  # an exact re-send of a recent record
                continue
            device = rng.choice(devices)
            record = {
                "Recorded_At": (start + timedelta(milliseconds=rng.randrange(SECONDS_PER_FILE * 1000)))
                .isoformat(timespec="milliseconds")
                .replace("+00:00", "Z"),
                "Device": device,
                "Index": k * rows + i,
                "Model": device.split("_")[0],
                "User": rng.choice(USERS),
                "gt": rng.choice(ACTIVITIES) if rng.random() > 0.02 else None,
                "x": round(rng.gauss(0, 3), 6),
                "y": round(rng.gauss(0, 3), 6),
                "z": round(rng.gauss(9.8, 2), 6),
            }
            line = json.dumps(record)
            lines.append(malformed_line(rng, line) if rng.random() < malformed else line)
        landed.append(land_file(folder, f"activity-{k:06d}.json", lines))
    return landed


def clicks_files(
    impressions: Path, clicks: Path, files: int, rows: int, click_rate: float = 0.3, seed: int | None = None
) -> list[Path]:
    """Land `files` rounds of the clicks pipeline: `rows` impressions per round and the clicks on them.

    Each round is an hour of impressions. A clicked impression gets one click 0 to 50 minutes later, in the same
    round's clicks file (so a click may belong to the next hour); one click in ten comes 61 to 90 minutes later,
    outside the pipeline's one-hour join range, and leaves its impression unclicked.
    """
    first = len(list(impressions.glob("impressions-*.json"))) if impressions.exists() else 0
    rng = random.Random(seed if seed is not None else first)
    landed = []

    def stamp(moment: datetime) -> str:
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    for k in range(first, first + files):
        start = ACTIVITY_EPOCH + timedelta(seconds=k * IMPRESSION_SECONDS_PER_FILE)
        shown, clicked = [], []
        for i in range(rows):
            impression_id = f"imp-{k:06d}-{i:05d}"
            moment = start + timedelta(milliseconds=rng.randrange(IMPRESSION_SECONDS_PER_FILE * 1000))
            shown.append(
                json.dumps({"impression_id": impression_id, "ad_id": rng.choice(ADS), "impression_time": stamp(moment)})
            )
            if rng.random() < click_rate:
                lag = rng.uniform(61, 90) if rng.random() < 0.1 else rng.uniform(0, 50)
                clicked.append(
                    json.dumps(
                        {
                            "click_id": f"click-{k:06d}-{i:05d}",
                            "impression_id": impression_id,
                            "click_time": stamp(moment + timedelta(minutes=lag)),
                        }
                    )
                )
        landed.append(land_file(impressions, f"impressions-{k:06d}.json", shown))
        landed.append(land_file(clicks, f"clicks-{k:06d}.json", clicked))
    return landed


DEVICES = tuple(f"d{n:02d}" for n in range(1, 9))
DEVICE_STATUSES = (("ok", 0.86), ("warning", 0.07), ("error", 0.03), ("offline", 0.03), ("rebooting", 0.01))


def device_events(
    start: datetime, hours: int, rows: int, malformed: float = 0.0, seed: int | None = None
) -> list[tuple[str | None, bytes]]:
    """`hours` hours of device_status events from `start`, about `rows` per hour, as (key, JSON value) messages.

    A device reports at most once a minute, on the minute. Keyed by device (so a device's events share a partition),
    sent in time order; about one in twenty carries an event time 15 to 40 minutes before it was sent (late). Each
    hour one device goes quiet after its first quarter (the sessions table closes its session by the timeout);
    battery drains and recharges; about 1 % report the unknown status `rebooting` (the silver gate sets those
    aside); `malformed` of them are not valid events (bronze's quarantine).
    """
    rng = random.Random(seed if seed is not None else int(start.timestamp()))
    battery = {device: rng.uniform(40, 100) for device in DEVICES}
    statuses = [status for status, _ in DEVICE_STATUSES]
    weights = [weight for _, weight in DEVICE_STATUSES]
    taken: set[tuple[str, int]] = set()  # (device, minute since start): at most one report a minute
    messages: list[tuple[str | None, bytes]] = []
    for hour in range(hours):
        quiet, sends = rng.choice(DEVICES), []
        for _ in range(rows):
            device = rng.choice(DEVICES)
            free = [
                m for m in range(hour * 60, hour * 60 + (15 if device == quiet else 60)) if (device, m) not in taken
            ]
            if free:
                minute = rng.choice(free)
                taken.add((device, minute))
                sends.append((minute, device))
        for sent_at, device in sorted(sends):
            minute, late = sent_at, rng.randint(15, 40)
            if rng.random() < 0.05 and sent_at - late >= 0 and (device, sent_at - late) not in taken:
                taken.add((device, sent_at - late))
                minute = sent_at - late
            battery[device] = 100.0 if battery[device] < 5 else battery[device] - rng.uniform(0, 2)
            value = json.dumps(
                {
                    "device_id": device,
                    "event_time": (start + timedelta(minutes=minute))
                    .isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z"),
                    "status": rng.choices(statuses, weights)[0],
                    "battery": round(battery[device], 1),
                }
            )
            if rng.random() < malformed:
                value = rng.choice(
                    [
                        value[: rng.randrange(5, len(value) - 5)],
                        "not json",
                        "[1, 2, 3]",
                        value.replace('"battery": ', '"battery": "full", "_b": ', 1),
                    ]
                )
            messages.append((device, value.encode()))
    return messages


def campaigns_file(folder: Path, campaigns: dict[str, tuple[str, str]] | None = None) -> Path:
    """Land the campaigns dimension as folder/campaigns.csv (header ad_id,campaign,advertiser), replacing it whole.

    Atomic like every landed file: a run that starts meanwhile reads the old dimension or the new one, never half.
    """
    rows = CAMPAIGNS if campaigns is None else campaigns
    lines = [
        "ad_id,campaign,advertiser",
        *(f"{ad},{campaign},{advertiser}" for ad, (campaign, advertiser) in sorted(rows.items())),
    ]
    return land_file(folder, "campaigns.csv", lines)


CUSTOMER_TIERS = ("free", "pro", "team")


def customer_change_files(
    folder: Path, files: int, rows: int, duplicates: float = 0.0, seed: int | None = None
) -> list[Path]:
    """Land `files` files of a customers table's change feed, `rows` changes each, as Debezium-style envelopes:
    `before`/`after` rows, `op` (c, u, d), `ts_ms` and the source's log position `source.lsn`, the sequence.

    A simulated database applies the changes in log order: new customers, updates of email, tier or name, deletes,
    and re-inserts of deleted ids. Each file then delivers them in another order, and holds about one change in
    ten back for the next file (late). `duplicates` of the changes are delivered twice. The database continues from
    the files already landed: their changes replayed in log order give its customers, and the log goes on after them.
    """
    first = len(list(folder.glob("changes-*.json"))) if folder.exists() else 0
    rng = random.Random(seed if seed is not None else first)
    live, deleted = _customers_after(folder)
    next_id = max([*live, *deleted, 0]) + 1
    held: list[str] = []
    landed = []
    for k in range(first, first + files):
        moment = ACTIVITY_EPOCH + timedelta(hours=k)
        lines = held
        held = []
        for i in range(rows):
            lsn = (k + 1) * 1_000_000 + i
            roll = rng.random()
            before: dict | None
            after: dict | None
            if live and roll < 0.45:
                key = rng.choice(sorted(live))
                before, after, op = live[key], _updated(rng, live[key], lsn), "u"
            elif live and roll < 0.6:
                key = rng.choice(sorted(live))
                before, after, op = live.pop(key), None, "d"
                deleted.append(key)
            else:
                if deleted and roll > 0.9:
                    key = deleted.pop(rng.randrange(len(deleted)))
                else:
                    key, next_id = next_id, next_id + 1
                before = None
                after = {
                    "id": key,
                    "email": f"c{key}@example.com",
                    "name": f"Customer {key}",
                    "tier": rng.choice(CUSTOMER_TIERS),
                }
                op = "c"
            if after is not None:
                live[key] = after
            envelope = {
                "before": before,
                "after": after,
                "op": op,
                "ts_ms": int((moment + timedelta(seconds=i)).timestamp() * 1000),
                "source": {"lsn": lsn, "table": "customers"},
            }
            line = json.dumps(envelope)
            (held if rng.random() < 0.1 and k < first + files - 1 else lines).append(line)
            if rng.random() < duplicates:
                lines.append(line)
        rng.shuffle(lines)
        landed.append(land_file(folder, f"changes-{k:06d}.json", lines))
    return landed


def _updated(rng: random.Random, row: dict, lsn: int) -> dict:
    """The customer with one of email, tier or name changed."""
    field = rng.choice(("email", "tier", "name"))
    key = row["id"]
    if field == "email":
        return {**row, "email": f"c{key}.{lsn % 97}@example.com"}
    if field == "tier":
        return {**row, "tier": rng.choice(CUSTOMER_TIERS)}
    return {**row, "name": f"Customer {key}{rng.choice('ABC')}"}


def _customers_after(folder: Path) -> tuple[dict[int, dict], list[int]]:
    """The simulated database after the changes already landed, replayed in log order: live rows by id, and the
    ids deleted (a call holds nothing back past its last file, so every change it made has landed)."""
    changes = [
        json.loads(line)
        for path in (sorted(folder.glob("changes-*.json")) if folder.exists() else [])
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    live: dict[int, dict] = {}
    deleted: list[int] = []
    for change in sorted(changes, key=lambda c: c["source"]["lsn"]):
        key = (change["after"] or change["before"])["id"]
        if change["op"] == "d":
            live.pop(key, None)
            deleted = [*[d for d in deleted if d != key], key]
        else:
            live[key] = change["after"]
            deleted = [d for d in deleted if d != key]
    return live, deleted
