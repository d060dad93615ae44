"""B4's baseline: DuckDB does bronze + silver's dedup + gold.device_counts on the same files, into a database file.

    python -m bench.jobs.duckdb_load <landing folder> <database file>

Prints one JSON line; `seconds` starts after `import duckdb` (as millpond's figure starts after the JVM is up).
"""

from __future__ import annotations

import json
import sys
import time

import duckdb

from tests.support.reference import DOUBLES, STRINGS  # the rules below restate the reference's, field for field

FIELDS = ("Recorded_At", *STRINGS, "Index", *DOUBLES)
NUMBERS = "'BIGINT', 'UBIGINT'"  # DuckDB's JSON type of a positive integer is UBIGINT


def value(field: str) -> str:
    """SQL: the field's JSON value, from the one extraction per line (SQL NULL when the field is absent)."""
    return f"v[{FIELDS.index(field) + 1}]"


def absent_or_null(field: str) -> str:
    return f"(json_type({value(field)}) IS NULL OR json_type({value(field)}) = 'NULL')"


# Spark's typed parse, which millpond's bronze and the reference (tests/support/reference.py, well_formed) apply: a
# line is a row only if it is a JSON object whose present fields have the schema's types; any other line is
# malformed and left out (DuckDB keeps no quarantine). read_json with ignore_errors would instead keep a wrongly
# typed field as NULL in an otherwise kept row. Restated for the line kinds the bench lands (bench/data.py); JSON
# oddities it never lands (a key twice, a trailing comma, timestamps outside ISO 8601) may be judged otherwise.
WELL_FORMED = " AND ".join(
    [
        "kind = 'OBJECT'",
        *(f"({absent_or_null(c)} OR json_type({value(c)}) = 'VARCHAR')" for c in STRINGS),
        f"({absent_or_null('Index')} OR (json_type({value('Index')}) IN ({NUMBERS}) "
        f"AND try_cast({value('Index')} AS BIGINT) IS NOT NULL))",
        *(f"({absent_or_null(c)} OR json_type({value(c)}) IN ('DOUBLE', {NUMBERS}))" for c in DOUBLES),
        f"({absent_or_null('Recorded_At')} OR (json_type({value('Recorded_At')}) = 'VARCHAR' "
        f"AND try_cast({value('Recorded_At')} ->> '$' AS TIMESTAMPTZ) IS NOT NULL))",
    ]
)
TYPED = ", ".join(
    [
        f"cast(cast({value('Recorded_At')} ->> '$' AS TIMESTAMPTZ) AS TIMESTAMP) AS Recorded_At",
        *(f"{value(c)} ->> '$' AS \"{c}\"" for c in STRINGS),
        f'cast({value("Index")} AS BIGINT) AS "Index"',
        *(f"cast({value(c)} AS DOUBLE) AS {c}" for c in DOUBLES),
    ]
)


def main(landing: str, database: str) -> int:
    started = time.perf_counter()
    db = duckdb.connect(database)
    db.execute("SET TimeZone = 'UTC'")
    paths = ", ".join(f"'$.{c}'" for c in FIELDS)
    db.execute(
        f"CREATE TABLE bronze AS SELECT {TYPED}, filename AS _source_file, now() AS _ingested_at FROM ("
        f"SELECT json_type(json) AS kind, json_extract(json, [{paths}]) AS v, filename FROM read_json_objects("
        f"'{landing}/*.json', format='newline_delimited', ignore_errors=true, filename=true)) WHERE {WELL_FORMED}"
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
