"""Each key's newest event, for a table's `stateful:` block in update mode (pipelines/device_status.yaml).

Called by Spark's `applyInPandasWithState` as `latest_status(key, rows, state, timestamp=..., fields=[...])` once
per key with new rows. The state is the newest event so far (JSON: its time in epoch milliseconds, its `fields`, the
key's event count), so an event that arrives out of order replaces it only if its time is greater: the greatest
event time wins, however late the event arrives. No timeout: one state row per key, kept for good.

An update-mode `aggregate` with `max_by` says the same in SQL (docs/examples.md); this function
is the example's arbitrary-state piece, and decides ties between equal event times by arrival.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

STATE_SCHEMA = "newest STRING"


def latest_status(key: tuple, rows: Iterator[Any], state: Any, *, timestamp: str, fields: list[str]) -> Iterator[Any]:
    """Output, by position: the key columns, then `fields` of the newest event, its time, the key's event count."""
    import pandas as pd

    saved = json.loads(state.get[0]) if state.exists else None
    newest, count = (saved["time"], saved["fields"]) if saved else (None, None), saved["events"] if saved else 0
    for pdf in rows:
        times = pdf[timestamp].to_numpy("datetime64[ms]").astype("int64")
        values = pdf[fields].astype(object).where(pdf[fields].notna(), None).values.tolist()
        for ms, row in zip(times.tolist(), values, strict=True):
            count += 1
            if newest[0] is None or ms > newest[0]:
                newest = (ms, row)
    if newest[0] is None:
        return
    state.update((json.dumps({"time": newest[0], "fields": newest[1], "events": count}),))
    yield pd.DataFrame([(*key, *newest[1], pd.Timestamp(newest[0], unit="ms"), count)])
