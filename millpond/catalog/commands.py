"""`millpond catalog start|stop|status|sync|airflow-db` and `millpond sql`: the command line of the catalog. What they say
about the catalog's server goes to stderr, so `millpond sql --format csv > file` holds the result only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from millpond import settings
from millpond.catalog import database

# Imported inside functions: pyspark (and the catalog's session) only for a command that starts Spark, so `millpond
# catalog start|stop|status` and every other `millpond` command stay light (millpond.cli imports this module).


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_catalog(args: argparse.Namespace) -> int:
    try:
        if args.action == "start":
            reached = database.connection(say)
            print(f"catalog: {reached.url} (user {reached.user})")
            return 0
        if args.action == "stop":
            if settings.METASTORE_URL.raw() is not None:
                say("millpond: the catalog is in MILLPOND_METASTORE_URL's database, which millpond does not stop")
            elif not database.stop(say, force=args.force):
                say(f"millpond: the catalog's PostgreSQL was not running ({database.embedded().data})")
            return 0
        if args.action == "status":
            return _status()
        if args.action == "airflow-db":  # scripts/airflow-up.sh: the file that holds Airflow's database URL
            if args.airflow_home is None:
                say("millpond: catalog airflow-db needs --airflow-home. Fix: pass the AIRFLOW_HOME the database is for")
                return 2
            print(database.airflow_database(Path(args.airflow_home), say))
            return 0
        return _sync()
    except database.CatalogDatabaseError as exc:
        say(f"millpond: {exc}")
        return 1


def _status() -> int:
    if (url := settings.METASTORE_URL.raw()) is not None:
        print(f"catalog: in MILLPOND_METASTORE_URL's database {url}; millpond runs no server of its own")
        return 0
    server = database.embedded()
    up = database.running(server) if server.data.is_dir() else False
    port = server.port()
    print(f"catalog's PostgreSQL: {'up on 127.0.0.1:' + str(port) if up else 'down'}; data {server.data}")
    return 0 if up else 1


def _sync() -> int:
    from millpond.catalog.session import catalog_session
    from millpond.catalog.sync import CatalogError, sync
    from millpond.spec import validate_all

    pipelines, problems = validate_all()
    for problem in problems:
        say(problem)
    if problems:
        say("millpond: catalog sync registers nothing while a spec is invalid. Fix: the problems above")
        return 2
    spark = catalog_session(say)
    try:
        result = sync(spark, pipelines)
    except CatalogError as exc:
        say(f"millpond: {exc}")
        return 1
    finally:
        spark.stop()
    print("\n".join(result.lines()))
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from pyspark.errors import PySparkException

    from millpond.catalog.query import render
    from millpond.catalog.session import catalog_session

    try:
        spark = catalog_session(say)
    except RuntimeError as exc:  # no database, no JDBC jar, an engine it cannot use: each names its fix
        say(f"millpond: {exc}")
        return 1
    try:
        frame = spark.sql(args.query)
        rows = frame.collect()
        sys.stdout.write(render(frame.columns, [tuple(row) for row in rows], args.format))
    except PySparkException as exc:  # its first line says what and where; the rest is Spark's plan
        say(f"millpond sql: {str(exc).splitlines()[0]}")
        return 1
    finally:
        spark.stop()
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from millpond.catalog.query import FORMATS

    catalog = sub.add_parser(
        "catalog",
        help="the shared catalog that names every table (bronze.x, silver.x, gold.x, millpond_system.*): start, "
        "stop or show its PostgreSQL, sync it with the specs and the lake, or make Airflow's database beside it",
    )
    catalog.add_argument(
        "action",
        choices=("start", "stop", "status", "sync", "airflow-db"),
        help="airflow-db: make Airflow's metadata database on the catalog's PostgreSQL (`make up` does) and print "
        "the private file that holds its URL",
    )
    catalog.add_argument("--airflow-home", help="airflow-db: the Airflow home whose database it is (AIRFLOW_HOME)")
    catalog.add_argument("--force", action="store_true", help="stop: even while Airflow has its database open")
    catalog.set_defaults(func=cmd_catalog)
    sql = sub.add_parser("sql", help="run one SQL query over the catalog's tables and print the result")
    sql.add_argument("query")
    sql.add_argument("--format", choices=FORMATS, default="table")
    sql.set_defaults(func=cmd_sql)
