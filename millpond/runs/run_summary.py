"""Per-run JSON summaries under `_system/runs/<pipeline>/`, readable without Spark.

One file per orchestrator run id. Several Spark applications of one Airflow run (ingest, gold) merge their
tables into it, so the summary task and `millpond status` see the whole run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from millpond.lake import paths, storage
from millpond.lake.paths import LakePath

REPROCESS_DAG_SUFFIX = "__reprocess"  # a pipeline's second DAG (millpond.airflow.factory): `<pipeline>__reprocess`


def dag_run_key(dag_id: str, run_id: str) -> tuple[str, str]:
    """(pipeline, run id as the runner records it) for an Airflow DAG run.

    A pipeline's second DAG, `<pipeline>__reprocess`, makes run ids that repeat the main DAG's (both name a run by
    the end of its interval: the daily run and the hourly run ending at midnight are both `scheduled__...T00:00`), so
    its runs are recorded as `<dag id>.<run id>`: their summaries and event-log rows never mix.
    """
    if dag_id.endswith(REPROCESS_DAG_SUFFIX):
        return dag_id.removesuffix(REPROCESS_DAG_SUFFIX), f"{dag_id}.{run_id}"
    return dag_id, run_id


def summary_path(pipeline: str, run_id: str, root: LakePath | None = None) -> LakePath:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
    return paths.system_path("runs", root) / pipeline / f"{safe}.json"


def load(pipeline: str, run_id: str, root: LakePath | None = None) -> dict[str, Any] | None:
    path = summary_path(pipeline, run_id, root)
    return json.loads(path.read_text()) if path.exists() else None


def latest(pipeline: str) -> dict[str, Any] | None:
    found: list[LakePath] = list((paths.system_path("runs") / pipeline).glob("*.json"))
    runs = sorted(found, key=lambda p: p.stat().st_mtime)
    return json.loads(runs[-1].read_text()) if runs else None


NO_INTERVAL = "none"  # a run without a logical date (REST API default, the UI's trigger without a date) has none


def interval_text(start: datetime | None, end: datetime | None) -> dict[str, str] | str:
    """The run's data interval as the summary records it: both ends, or "none" when the run has no interval."""
    if start is None or end is None:
        return NO_INTERVAL
    return {"start": start.isoformat(), "end": end.isoformat()}


def describe_interval(summary: dict[str, Any] | None) -> str:
    interval = (summary or {}).get("data_interval", NO_INTERVAL)
    return f"{interval['start']} -> {interval['end']}" if isinstance(interval, dict) else str(interval)


def merge(
    pipeline: str,
    run_id: str,
    trigger: str,
    tables: list[dict[str, Any]],
    data_interval: dict[str, str] | str = NO_INTERVAL,
) -> LakePath:
    """Add or replace this application's tables in the run's summary (written atomically)."""
    target = summary_path(pipeline, run_id)
    body = load(pipeline, run_id) or {"pipeline": pipeline, "run_id": run_id, "trigger": trigger, "tables": []}
    body["data_interval"] = data_interval
    fresh = {t["table"] for t in tables}
    body["tables"] = [t for t in body["tables"] if t["table"] not in fresh] + tables
    body["updated_at"] = datetime.now(UTC).isoformat()
    storage.write_whole(target, json.dumps(body, indent=2, default=str))
    return target
