"""Sessionization with an inactivity gap: stateful functions for a table's `stateful:` block.

Each is called by Spark's `applyInPandasWithState` as `fn(key, rows, state, timestamp=..., gap=...)`, once per key
with new rows and once per key whose event-time timeout the watermark passed (then with no rows). A session is a
key's events where each follows the previous one by at most `gap`. Out-of-order events may bridge two sessions
until the watermark passes, so the state keeps every open session of the key (a JSON list of [first, last, count],
event times in epoch milliseconds; a string because PySpark 4.2's worker cannot read an ARRAY state schema), and a
session is final once the watermark passes its last event + gap: no event that is not late can
join it any more. The timeout is set to the earliest open session's end + gap, so Spark calls back exactly then.

    state_schema: open_sessions STRING

Both functions need `timeout: event_time` (and so the table's watermark). Output rows have integer column labels,
so millpond names them by position from the spec's `output_schema` (millpond.driver.plan.call_stateful): the key columns
first, whatever they are called.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

STATE_SCHEMA = "open_sessions STRING"

Session = tuple[int, int, int]  # (first event, last event, events); event times in epoch milliseconds


def sessions(key: tuple, rows: Iterator[Any], state: Any, *, timestamp: str, gap: str) -> Iterator[Any]:
    """Append mode: each session once, when it is final.

    Output, by position: the key columns, first event, last event, event count (docs/spec.md).
    """
    closed, _ = _advance(rows, state, timestamp, gap_ms(gap))
    if closed:
        yield _frame([(*key, _ts(s), _ts(e), c) for s, e, c in closed])


def latest_session(key: tuple, rows: Iterator[Any], state: Any, *, timestamp: str, gap: str) -> Iterator[Any]:
    """Update mode (the course's user-status example): the key's latest session, open or final, MERGEd on the key.

    Emitted on every call, so the row follows each new event and turns `active = false` when the session is final.
    Output, by position: the key columns, first event, last event, event count, active.
    """
    closed, still_open = _advance(rows, state, timestamp, gap_ms(gap))
    latest = max([(s, True) for s in still_open] + [(s, False) for s in closed], default=None)
    if latest is not None:
        (start, end, count), active = latest
        yield _frame([(*key, _ts(start), _ts(end), count, active)])


def gap_ms(gap: str) -> int:
    """'30 minutes' -> 1800000 (the spec's duration syntax; the option is validated nowhere else, so fail clearly)."""
    from millpond.spec import duration_seconds

    seconds = duration_seconds(gap)
    if not seconds:
        raise ValueError(f"stateful option gap: {gap!r} is not a duration. Fix: write e.g. '30 minutes'")
    return seconds * 1000


def merge(open_sessions: list[Session], times: list[int], gap: int) -> list[Session]:
    """Open sessions plus new event times -> sessions, merging any two at most `gap` apart."""
    pieces = sorted([*open_sessions, *((t, t, 1) for t in times)])
    merged: list[list[int]] = []
    for start, end, count in pieces:
        if merged and start - merged[-1][1] <= gap:
            merged[-1][1] = max(merged[-1][1], end)
            merged[-1][2] += count
        else:
            merged.append([start, end, count])
    return [(s, e, c) for s, e, c in merged]


def _advance(rows: Iterator[Any], state: Any, timestamp: str, gap: int) -> tuple[list[Session], list[Session]]:
    """Merge the key's new events into its open sessions; close those the watermark passed; save the rest."""
    times = [int(t) for pdf in rows for t in pdf[timestamp].dropna().to_numpy("datetime64[ms]").astype("int64")]
    saved = [(s, e, c) for s, e, c in json.loads(state.get[0])] if state.exists else []
    merged = merge(saved, times, gap)
    watermark = state.getCurrentWatermarkMs()
    closed = [s for s in merged if s[1] + gap < watermark]  # Spark times out a key when its timeout < watermark
    still_open = [s for s in merged if s[1] + gap >= watermark]
    if still_open:
        state.update((json.dumps(still_open),))
        try:
            state.setTimeoutTimestamp(min(e for _, e, _ in still_open) + gap)
        except RuntimeError as exc:  # pyspark's own message names processing-time timeouts, which misleads
            raise RuntimeError("sessions need 'timeout: event_time' in the table's stateful block") from exc
    else:
        state.remove()
    return closed, still_open


def _ts(ms: int) -> Any:
    import pandas as pd

    return pd.Timestamp(ms, unit="ms")  # naive: Spark reads it in the session time zone, UTC in millpond


def _frame(rows: list[tuple]) -> Any:
    import pandas as pd

    return pd.DataFrame(rows)
