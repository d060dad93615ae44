"""The one naming scheme for the lake: every path, checkpoint and query name is derived here.

    table `silver.activity`     -> $MILLPOND_LAKE/silver/activity
    its quarantine              -> $MILLPOND_LAKE/silver/activity_quarantine
    its checkpoint              -> $MILLPOND_LAKE/_checkpoints/<pipeline>/silver.activity
    its streaming query name    -> <pipeline>.silver.activity
    event log                   -> $MILLPOND_LAKE/_system/event_log
    pipeline lock               -> $MILLPOND_LAKE/_system/locks/<pipeline>.lock
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


# What Hadoop's globbing reads as a pattern in a path given to Spark's file source (which then reads other files or
# another folder), and `[`/`]` also stop delta-rs from opening a table: no lake path may hold them.
GLOB_CHARACTERS = frozenset("{}[]*?\\")
GLOB_SHOWN = " ".join(sorted(GLOB_CHARACTERS))  # as error messages list them


def lake_root() -> Path:
    return Path(os.environ.get("MILLPOND_LAKE") or REPO_ROOT / "lake").resolve()


def pipelines_dir() -> Path:
    return Path(os.environ.get("MILLPOND_PIPELINES") or REPO_ROOT / "pipelines").resolve()


def expectations_dir() -> Path:
    return Path(os.environ.get("MILLPOND_EXPECTATIONS") or REPO_ROOT / "expectations").resolve()


def table_path(table_id: str, root: Path | None = None) -> Path:
    layer, name = table_id.split(".")
    return (root or lake_root()) / layer / name


def quarantine_path(table_id: str, root: Path | None = None) -> Path:
    layer, name = table_id.split(".")
    return (root or lake_root()) / layer / f"{name}_quarantine"


def checkpoint_path(pipeline: str, table_id: str, root: Path | None = None) -> Path:
    return (root or lake_root()) / "_checkpoints" / pipeline / table_id


def landing_path(relative: str, root: Path | None = None) -> Path:
    return (root or lake_root()) / relative


def query_name(pipeline: str, table_id: str) -> str:
    return f"{pipeline}.{table_id}"


def system_path(name: str, root: Path | None = None) -> Path:
    return (root or lake_root()) / "_system" / name


def event_log_path(root: Path | None = None) -> Path:
    return system_path("event_log", root)


def query_progress_path(root: Path | None = None) -> Path:
    return system_path("query_progress", root)


def lock_path(pipeline: str, root: Path | None = None) -> Path:
    return system_path("locks", root) / f"{pipeline}.lock"


def jars_dir() -> Path:
    return Path(os.environ.get("MILLPOND_JARS") or REPO_ROOT / ".cache" / "jars").resolve()


# millpond's own Spark functions (jvm/), which `make setup` compiles next to the fetched jars.
FUNCTIONS_JAR = "millpond-spark.jar"


def spark_jars() -> list[str]:
    """The jars every millpond application ships (Delta's and Kafka's, which `make jars` fetches, and millpond's
    functions, which `make jvm` builds), or a clear error: both local sessions and spark-submit need them."""
    jars = sorted(str(p) for p in jars_dir().glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise RuntimeError(f"Delta jars not found in {jars_dir()}. Fix: run `make jars` (needs Java 17 and Maven).")
    if not (jars_dir() / FUNCTIONS_JAR).is_file():
        raise RuntimeError(f"{FUNCTIONS_JAR} (millpond's Spark functions) not found in {jars_dir()}. Fix: run "
                           "`make jvm` (needs a JDK 17's javac).")  # fmt: skip
    return jars
