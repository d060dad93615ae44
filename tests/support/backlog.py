"""`millpond backlog` as a test reads it, and what a run read by other records: the files bronze's file source
logged (its seen-files log) and the rows Spark counted into each table (the run summary's `rows_in`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from millpond.lake import checkpoints, paths
from millpond.runs import run_summary
from millpond.spec import load_pipeline
from tests.support.stress import MILLPOND


def backlog(lake: Path, pipeline: str = "activity") -> dict[str, dict]:
    """`millpond backlog <pipeline> --json` in a process of its own (no JVM), by table."""
    done = subprocess.run(
        [MILLPOND, "backlog", pipeline, "--json"],
        env={**os.environ, "MILLPOND_LAKE": str(lake)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return {entry["table"]: entry for entry in json.loads(done.stdout)}


def committed_batch(table_id: str, pipeline: str = "activity") -> int:
    """The newest batch Spark's commit log holds for the table (-1: none)."""
    commits = checkpoints.log_files(paths.checkpoint_path(pipeline, table_id) / "commits")
    return int(commits[-1].name.split(".")[0]) if commits else -1


def files_read_after(batch: int, table_id: str = "bronze.activity", pipeline: str = "activity") -> list[str]:
    """The landing files the table's file source logged in batches after `batch` (decoded paths)."""
    spec = load_pipeline(pipeline)
    seen = checkpoints.seen_file_batches(spec, spec.tables[table_id])
    return sorted(paths.from_uri(uri) for uri, logged in seen.items() if logged > batch)


def run_tables(run_id: str, pipeline: str = "activity") -> dict[str, dict]:
    """Each table's entry in the run's summary: `rows_in` (the rows Spark counted into it), `backlog_*` (what the
    run recorded as waiting before it started Spark)."""
    body = run_summary.load(pipeline, run_id)
    assert body is not None, f"no summary of run {run_id}"
    return {t["table"]: t for t in body["tables"]}
