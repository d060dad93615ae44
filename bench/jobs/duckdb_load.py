"""B4's baseline: DuckDB does bronze + silver's dedup + gold.device_counts on the same files, into a database file.

    python -m bench.jobs.duckdb_load <landing folder> <database file>

Prints one JSON line; `seconds` starts after `import duckdb` (as millpond's figure starts after the JVM is up).
"""

from __future__ import annotations

import json
import sys
import time

import duckdb

COLUMNS = {
    "Recorded_At": "TIMESTAMP",
    "Device": "VARCHAR",
    "Index": "BIGINT",
    "Model": "VARCHAR",
    "User": "VARCHAR",
    "gt": "VARCHAR",
    "x": "DOUBLE",
    "y": "DOUBLE",
    "z": "DOUBLE",
}


def main(landing: str, database: str) -> int:
    started = time.perf_counter()
    db = duckdb.connect(database)
    db.execute(
        f"CREATE TABLE bronze AS SELECT *, filename AS _source_file, now() AS _ingested_at FROM read_json("
        f"'{landing}/*.json', format='newline_delimited', columns={COLUMNS!r}, ignore_errors=true, filename=true)"
    )
    db.execute(
        "CREATE TABLE silver AS SELECT DISTINCT ON (Device, Index, Recorded_At) * FROM bronze "
        "WHERE Device IS NOT NULL AND Recorded_At IS NOT NULL"
    )
    db.execute("CREATE TABLE device_counts AS SELECT Device, count(*) AS total_recordings FROM silver GROUP BY Device")
    db.close()
    seconds = time.perf_counter() - started
    rows = duckdb.connect(database, read_only=True).execute("SELECT count(*) FROM bronze").fetchone()[0]
    print(json.dumps({"seconds": seconds, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
