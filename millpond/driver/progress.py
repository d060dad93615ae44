"""Every micro-batch's progress, as Spark reports it to a StreamingQueryListener.

While a run goes, each batch prints one line to the task log (rows, input and processing rate, state rows,
watermark, late rows), so someone watching an Airflow task sees a long backfill advance. When a table's query
ends, its batches feed the table's event-log row and `_system/query_progress` (one row per batch).
`query.recentProgress` would give the same objects only after the query ends and only the newest
`spark.sql.streaming.numRecentProgressUpdates` (100) of them: too few for a backfill of many batches.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryProgress,
)

# Spark posts listener events asynchronously; the terminated event follows the last progress event.
EVENTS_TIMEOUT_SECONDS = 60.0
# How long a run's end waits for its queries' terminated events before removing its listener (await_ends).
QUIET_SECONDS = 30.0


class ProgressListener(StreamingQueryListener):
    """Collects progress per query run; `tables` maps query names to the table ids printed in the log."""

    def __init__(self, tables: dict[str, str]):
        self.tables = tables
        self._progress: dict[str, list[StreamingQueryProgress]] = defaultdict(list)
        self._ended: dict[str, threading.Event] = defaultdict(threading.Event)
        self._lock = threading.Lock()
        self.finished: list[tuple[str, StreamingQueryProgress]] = []  # (table id, batch) of every ended query
        # (table id, batch id) -> rows, from a writer that reads its batch more than once (bronze's quarantine
        # pass): Spark's numInputRows counts every read.
        self.rows_read: dict[tuple[str, int], int] = {}

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        with self._lock:
            self._ended[str(event.runId)]  # a query of this listener's: its end is awaited (await_ends)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        with self._lock:
            self._progress[str(progress.runId)].append(progress)
        table_id = self.tables.get(progress.name or "", progress.name or "?")
        print(progress_line(table_id, progress, self.input_rows(table_id, progress)), flush=True)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        with self._lock:
            ended = self._ended[str(event.runId)]
        ended.set()

    def input_rows(self, table_id: str, p: StreamingQueryProgress) -> int:
        return self.rows_read.get((table_id, p.batchId), p.numInputRows)

    def progress_of(self, query: StreamingQuery) -> list[StreamingQueryProgress]:
        """Every batch of this query run, once Spark has delivered them all (its terminated event)."""
        run_id = str(query.runId)
        with self._lock:
            ended = self._ended[run_id]
        if not ended.wait(EVENTS_TIMEOUT_SECONDS):
            print(
                f"millpond: warning: Spark did not report the end of query {query.name} within "
                f"{EVENTS_TIMEOUT_SECONDS:.0f}s; its counts come from the query's recent progress",
                file=sys.stderr,
            )
            return list(query.recentProgress)
        with self._lock:
            progresses = self._progress.pop(run_id, [])
        self.finished.extend((self.tables.get(query.name, query.name), p) for p in progresses)
        return progresses

    def await_ends(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, until every query this listener saw start has reported its end.

        On Spark Connect, removing a listener while an event is still on its way deadlocks pyspark: its listener bus
        joins the event thread while holding the lock that thread needs to deliver the event. Seen in CI when a
        gate-failed query's terminated event trailed the run's own exception (the run hung in removeListener)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            pending = list(self._ended.values())
        for ended in pending:
            ended.wait(max(0.0, deadline - time.monotonic()))

    def claim_the_rest(self) -> None:
        """Batches of queries that failed (nobody asked for them) still belong in `_system/query_progress`."""
        with self._lock:
            rest, self._progress = self._progress, defaultdict(list)
        for progresses in rest.values():
            self.finished.extend((self.tables.get(p.name or "", p.name or "?"), p) for p in progresses)


class listening:
    """`with listening(spark, tables) as listener:` a ProgressListener registered for the block only."""

    def __init__(self, spark: SparkSession, tables: dict[str, str]):
        self.spark, self.listener = spark, ProgressListener(tables)

    def __enter__(self) -> ProgressListener:
        self.spark.streams.addListener(self.listener)
        return self.listener

    def __exit__(self, *exc_info: object) -> None:
        self.listener.await_ends(QUIET_SECONDS)  # no event in flight when the listener goes (await_ends)
        self.spark.streams.removeListener(self.listener)
        self.listener.claim_the_rest()


def progress_line(table_id: str, p: StreamingQueryProgress, rows: int) -> str:
    state_rows = sum(s.numRowsTotal for s in p.stateOperators)
    late = sum(s.numRowsDroppedByWatermark for s in p.stateOperators)
    return (
        f"millpond: progress {table_id} batch {p.batchId}: {rows} rows in {p.batchDuration / 1000:.1f}s, "
        f"input {_rate(_scaled(p.inputRowsPerSecond, p, rows))} rows/s, processed "
        f"{_rate(_scaled(p.processedRowsPerSecond, p, rows))} rows/s, state {state_rows} rows, watermark "
        f"{_iso(watermark_of(p))}, late {late}"
    )


def watermark_of(p: StreamingQueryProgress) -> datetime | None:
    """The event-time watermark after this batch; None for a query without one (or before its first event)."""
    text = (p.eventTime or {}).get("watermark")
    if not text or text.startswith("1970-01-01T00:00:00"):
        return None
    return datetime.fromisoformat(text)


def batch_rows(pipeline: str, run_id: str, listener: ProgressListener) -> list[dict]:
    """`_system/query_progress` rows, one per micro-batch of every query that ended."""
    rows = []
    for table_id, p in listener.finished:
        read = listener.input_rows(table_id, p)
        rows.append(batch_row(pipeline, run_id, table_id, p, read))
    return rows


def batch_row(pipeline: str, run_id: str, table_id: str, p: StreamingQueryProgress, rows: int) -> dict:
    return {
        "run_id": run_id,
        "pipeline": pipeline,
        "table": table_id,
        "batch_id": p.batchId,
        "started_at": datetime.fromisoformat(p.timestamp),
        "duration_ms": p.batchDuration,
        "input_rows": rows,
        "input_rows_per_second": _finite(_scaled(p.inputRowsPerSecond, p, rows)),
        "processed_rows_per_second": _finite(_scaled(p.processedRowsPerSecond, p, rows)),
        "state_rows": sum(s.numRowsTotal for s in p.stateOperators),
        "state_memory_bytes": sum(s.memoryUsedBytes for s in p.stateOperators),
        "rows_dropped_by_watermark": sum(s.numRowsDroppedByWatermark for s in p.stateOperators),
        "watermark": watermark_of(p),
    }


def _scaled(rate: float | None, p: StreamingQueryProgress, rows: int) -> float | None:
    """Spark's rate over its own row count, restated for the rows the batch really had."""
    if rate is None or p.numInputRows == rows:
        return rate
    return rate * rows / p.numInputRows if p.numInputRows else None


def _iso(moment: datetime | None) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z") if moment else "-"


def _finite(rate: float | None) -> float | None:
    return rate if rate is not None and rate == rate and rate != float("inf") else None


def _rate(rate: float | None) -> str:
    value = _finite(rate)
    return "-" if value is None else f"{value:,.0f}"
