"""The one naming scheme for the lake: every path, checkpoint and query name is derived here.

table `silver.activity`     -> $MILLPOND_LAKE/silver/activity
its quarantine              -> $MILLPOND_LAKE/silver/activity_quarantine
its checkpoint              -> $MILLPOND_LAKE/_checkpoints/<pipeline>/silver.activity
its streaming query name    -> <pipeline>.silver.activity
event log                   -> $MILLPOND_LAKE/_system/event_log
pipeline lock               -> $MILLPOND_LAKE/_system/locks/<pipeline>.lock
its commit lock (engine)    -> $MILLPOND_LAKE/_system/locks/<pipeline>.commit.lock
unfinished reprocess        -> $MILLPOND_LAKE/_system/reprocess/<pipeline>.json
"""

from __future__ import annotations

from pathlib import Path

from millpond import settings


def table_path(table_id: str, root: Path | None = None) -> Path:
    layer, name = table_id.split(".")
    return (root or settings.lake_root()) / layer / name


def quarantine_path(table_id: str, root: Path | None = None) -> Path:
    layer, name = table_id.split(".")
    return (root or settings.lake_root()) / layer / f"{name}_quarantine"


def checkpoint_path(pipeline: str, table_id: str, root: Path | None = None) -> Path:
    return (root or settings.lake_root()) / "_checkpoints" / pipeline / table_id


def landing_path(relative: str, root: Path | None = None) -> Path:
    return (root or settings.lake_root()) / relative


def query_name(pipeline: str, table_id: str) -> str:
    return f"{pipeline}.{table_id}"


def system_path(name: str, root: Path | None = None) -> Path:
    return (root or settings.lake_root()) / "_system" / name


def event_log_path(root: Path | None = None) -> Path:
    return system_path("event_log", root)


def query_progress_path(root: Path | None = None) -> Path:
    return system_path("query_progress", root)


def lock_path(pipeline: str, root: Path | None = None) -> Path:
    return system_path("locks", root) / f"{pipeline}.lock"


def commit_lock_path(pipeline: str, root: Path | None = None) -> Path:
    return system_path("locks", root) / f"{pipeline}.commit.lock"
