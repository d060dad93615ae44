"""The one naming scheme for the lake: every path, checkpoint and query name is derived here.

table `silver.activity`     -> $MILLPOND_LAKE/silver/activity
its quarantine              -> $MILLPOND_LAKE/silver/activity_quarantine
a CDC table's change store  -> $MILLPOND_LAKE/silver/_cdc/customers
its checkpoint              -> $MILLPOND_LAKE/_checkpoints/<pipeline>/silver.activity
its streaming query name    -> <pipeline>.silver.activity
event log                   -> $MILLPOND_LAKE/_system/event_log
pipeline lock               -> $MILLPOND_LAKE/_system/locks/<pipeline>.lock
its commit lock (engine)    -> $MILLPOND_LAKE/_system/locks/<pipeline>.commit.lock
the engine's state and log  -> $MILLPOND_LAKE/_system/engine
unfinished reprocess        -> $MILLPOND_LAKE/_system/reprocess/<pipeline>.json
freshness status changes    -> $MILLPOND_LAKE/_system/freshness

The lake is a local (or mounted) folder or an object-store prefix (`MILLPOND_LAKE=s3a://bucket/prefix`): every
path here is a `LakePath`, a `pathlib.Path` or an `S3Path` with the same few operations, and `str()` of either is
what Spark reads (`s3a://...` for the store). On the store, what must be a local file (the engine's state file,
which holds its token; an engine's commit locks, which are `flock`s) lives in a folder of this machine's user
instead: `$XDG_STATE_HOME/millpond/drivers/<bucket>-<hash of the lake's URL>` (`engine_dir`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TypeAlias
from urllib.parse import unquote, urlparse

from millpond import settings
from millpond.lake.object_store import SCHEMES, S3Path, is_object_store
from millpond.spec.model import DeltaSource, Pipeline

LakePath: TypeAlias = Path | S3Path


def lake_root() -> LakePath:
    """The lake: `settings.lake_root()` for a folder, an S3Path for `s3a://` (or `s3://`)."""
    raw = settings.LAKE.raw()
    if raw is not None and is_object_store(raw):
        return S3Path(raw)
    return settings.lake_root()


def as_lake_path(location: str | os.PathLike[str] | S3Path) -> LakePath:
    """A path or URL as handed around (Spark options are strings): `s3a://...` stays on the store."""
    if isinstance(location, S3Path):
        return location
    return S3Path(str(location)) if is_object_store(location) else Path(location)


def from_uri(uri: str) -> str:
    """A file's URI as Spark logs and reports it (`file:/...`, `s3a://bucket/...`, percent-encoded) -> the location it
    names, decoded: a local path, or an `s3a://` URL on the store (`s3://` names the same store)."""
    url = urlparse(uri)
    if url.scheme.lower() in SCHEMES:
        return f"s3a://{url.netloc}{unquote(url.path)}"
    return unquote(url.path)


def on_disk(path: LakePath, what: str = "this") -> Path:
    """`path` for what only a local (or mounted) lake offers; on object storage, an error naming the fix."""
    if isinstance(path, S3Path):
        raise settings.SettingError(
            f"{path}: {what} needs the lake on a local or shared folder, and MILLPOND_LAKE is on object storage "
            "(docs/object-storage.md lists what works there). Fix: point MILLPOND_LAKE at a folder for this"
        )
    return path


def table_path(table_id: str, root: LakePath | None = None) -> LakePath:
    layer, name = table_id.split(".")
    return (root or lake_root()) / layer / name


def quarantine_path(table_id: str, root: LakePath | None = None) -> LakePath:
    layer, name = table_id.split(".")
    return (root or lake_root()) / layer / f"{name}_quarantine"


def changes_path(table_id: str, root: LakePath | None = None) -> LakePath:
    """A CDC table's change store: every distinct event applied (SCD 2), or each key's newest one (SCD 1, deletes
    kept as tombstones), so an event arriving late finds its place (docs/cdc.md)."""
    layer, name = table_id.split(".")
    return (root or lake_root()) / layer / "_cdc" / name


def checkpoint_path(pipeline: str, table_id: str, root: LakePath | None = None) -> LakePath:
    return (root or lake_root()) / "_checkpoints" / pipeline / table_id


def landing_path(relative: str, root: LakePath | None = None) -> LakePath:
    return (root or lake_root()) / relative


def upstream_path(pipeline: Pipeline, upstream: str, root: LakePath | None = None) -> LakePath:
    """Where a table reads an upstream as Delta: a table of the pipeline, or a Delta source (another job's table)."""
    source = pipeline.sources.get(upstream)
    return landing_path(source.path, root) if isinstance(source, DeltaSource) else table_path(upstream, root)


def query_name(pipeline: str, table_id: str) -> str:
    return f"{pipeline}.{table_id}"


def system_path(name: str, root: LakePath | None = None) -> LakePath:
    return (root or lake_root()) / "_system" / name


def event_log_path(root: LakePath | None = None) -> LakePath:
    return system_path("event_log", root)


def freshness_path(root: LakePath | None = None) -> LakePath:
    return system_path("freshness", root)


def query_progress_path(root: LakePath | None = None) -> LakePath:
    return system_path("query_progress", root)


def lock_path(pipeline: str, root: LakePath | None = None) -> LakePath:
    return system_path("locks", root) / f"{pipeline}.lock"


def commit_lock_path(pipeline: str, root: LakePath | None = None) -> Path:
    """The flock a batch on the engine commits under (millpond.driver.connect_batch). On an object-store lake it is
    in the engine's local folder, so it orders the batches of one engine and the runs of its machine."""
    lake = root if root is not None else lake_root()
    if isinstance(lake, S3Path):
        return engine_dir(lake) / "locks" / f"{pipeline}.commit.lock"
    return on_disk(system_path("locks", lake) / f"{pipeline}.commit.lock", "a flock")


def engine_dir(root: LakePath | None = None) -> Path:
    """The engine's folder (its state file with the token, its log; millpond.driver.connect_server): in the lake's
    `_system` for a folder lake; for an object-store lake a folder of this machine's user, one per lake URL."""
    lake = root if root is not None else lake_root()
    if isinstance(lake, S3Path):
        xdg = os.environ.get("XDG_STATE_HOME", "")
        state = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"  # XDG: a relative one is ignored
        digest = hashlib.sha256(lake.url.encode()).hexdigest()[:16]
        return state / "millpond" / "engines" / f"{lake.location.bucket}-{digest}"
    return on_disk(system_path("engine", lake), "the engine")
