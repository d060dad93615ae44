"""Read a Delta table's size from its transaction log without a JVM (status, demo output, Airflow summaries).

Replays the newest checkpoint (parquet) plus the JSON commits after it and sums `numRecords` from the
per-file statistics Delta writes with every added file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TableState:
    version: int
    files: int
    rows: int


def table_state(path: Path) -> TableState | None:
    log = Path(path) / "_delta_log"
    if not log.is_dir():
        return None
    live: dict[str, int] = {}
    start = -1
    last_checkpoint = log / "_last_checkpoint"
    if last_checkpoint.exists():
        import pyarrow.parquet as pq  # only tables with 10+ commits have a checkpoint

        start = json.loads(last_checkpoint.read_text())["version"]
        for part in sorted(log.glob(f"{start:020d}.checkpoint*.parquet")):
            for add in pq.read_table(part, columns=["add"]).column("add").to_pylist():
                if add:
                    live[add["path"]] = _records(add.get("stats"))
    version = start
    for commit in sorted(log.glob("*.json")):
        number = int(commit.name.split(".")[0])
        if number <= start:
            continue
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = _records(action["add"].get("stats"))
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
        version = number
    return TableState(version=version, files=len(live), rows=sum(live.values()))


def _records(stats: str | None) -> int:
    return int(json.loads(stats).get("numRecords", 0)) if stats else 0
