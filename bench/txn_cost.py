"""What Delta's idempotent write costs an append: the same small batches appended with and without
`txnAppId`/`txnVersion`, alternating, in one warm JVM, onto tables with a history of earlier appends.

With the options delta-spark reads the app's transaction state from the table's snapshot before it commits (the check
that skips a replayed batch). Every streaming write millpond makes carries them (docs/reliability.md, idempotent sink), so
this is the price of exactly once on an append, measured alone. Both tables get the same rows; their row counts are
checked against each other before any figure is written. Writes bench/results-txn.json (not committed). Not a timed
test. Usage:

    .venv/bin/python bench/txn_cost.py [--history 100] [--appends 20] [--rows 10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=100, help="appends made before the timed ones")
    parser.add_argument("--appends", type=int, default=20, help="timed appends per side")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per append")
    args = parser.parse_args(argv)

    from millpond.driver.session import build_spark_session

    spark = build_spark_session("millpond-bench-txn")
    work = Path(tempfile.mkdtemp(prefix="millpond-txn-"))
    tables = {"with_txn": str(work / "with_txn"), "without_txn": str(work / "without_txn")}

    def append(side: str, batch_id: int) -> float:
        rows = spark.range(batch_id * args.rows, (batch_id + 1) * args.rows).selectExpr("id", "id % 7 AS k")
        writer = rows.write.format("delta").mode("append")
        if side == "with_txn":
            writer = writer.option("txnAppId", "bench").option("txnVersion", batch_id)
        started = time.perf_counter()
        writer.save(tables[side])
        return time.perf_counter() - started

    for batch_id in range(args.history):  # the history, untimed (Spark checkpoints every 10 commits)
        for side in tables:
            append(side, batch_id)
    timed: dict[str, list[float]] = {side: [] for side in tables}
    for k in range(args.appends):
        order = list(tables) if k % 2 == 0 else list(reversed(tables))  # sides alternating
        for side in order:
            timed[side].append(append(side, args.history + k))
    counts = {side: spark.read.format("delta").load(path).count() for side, path in tables.items()}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the two tables differ: {counts}")
    figure = {
        "history_appends": args.history,
        "rows_per_append": args.rows,
        "rows_per_table": counts["with_txn"],
        "seconds_per_append": {
            side: {"median": round(statistics.median(s), 3), "min": round(min(s), 3), "max": round(max(s), 3)}
            for side, s in timed.items()
        },
        "with_over_without": round(statistics.median(timed["with_txn"]) / statistics.median(timed["without_txn"]), 3),
    }
    out = REPO / "bench" / "results-txn.json"
    out.write_text(json.dumps(figure, indent=2) + "\n")
    print(json.dumps(figure, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
