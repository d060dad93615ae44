"""What every test shares: the marker rule, Airflow's environment, one session-scoped local Spark (Delta, UI off,
2 shuffle partitions), a lake per test, and one session-scoped Kafka broker for the tests that ask for it.

The marker rule: `make check` runs `pytest -m unit` and trusts that nothing it selects starts a JVM or Airflow, and
`make test` runs the integration tests after it, all but the few marked `outside_ci` (scenarios that do not yet fit
CI's budget: docs/testing.md). A test with no kind, both kinds, a kind its folder contradicts, or a unit test marked
`outside_ci` would silently land in the wrong lane, so collection fails instead, naming the test.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

from tests.support import REPO

pytest_plugins = ["pytester"]  # tests/unit/test_conftest_markers.py runs pytest on a throwaway tree

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["TZ"] = "UTC"
# py4j logs "Closing down clientserver connection" at exit, after pytest closed its capture streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

# Airflow reads its configuration once, at import: its own home per session (SQLite), no examples, our dags/ folder,
# local Spark. Set here, before any test module imports airflow, for the unit tests that build DAGs in-process and the
# integration tests that start `airflow` processes alike.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="millpond-airflow-"))
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ.setdefault("AIRFLOW_CONN_SPARK_MILLPOND", '{"conn_type": "spark", "host": "local[2]"}')

KINDS = ("unit", "integration")
TESTS = Path(__file__).resolve().parent


def marker_problem(item: pytest.Item) -> str | None:
    """Why `item` breaks the marker rule, or None: exactly one kind, the one its folder (tests/<kind>/) names."""
    kinds = sorted({mark.name for mark in item.iter_markers() if mark.name in KINDS})
    path = Path(str(item.path)).resolve()
    parts = path.relative_to(TESTS).parts if path.is_relative_to(TESTS) else ()
    folder = parts[0] if len(parts) > 1 else ""
    if folder not in KINDS:
        return "lives outside tests/unit/ and tests/integration/: move it to the folder of its kind"
    if not kinds:
        return f"has no marker: add `pytestmark = pytest.mark.{folder}` to its module"
    if len(kinds) > 1:
        return f"is marked both unit and integration: keep only `{folder}`, or move it to the other folder"
    if kinds[0] != folder:
        return f"is marked {kinds[0]} but lives in tests/{folder}/: mark it `{folder}`, or move it to tests/{kinds[0]}/"
    if folder == "unit" and item.get_closest_marker("outside_ci"):
        return "is a unit test marked outside_ci: `outside_ci` keeps integration scenarios out of CI; drop it"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A file whose tests break the rule is a collection error naming each one: the session stops before any test
    runs, whatever `-m` selects afterwards and whichever pytest-xdist worker collects it."""
    report = yield
    if report.passed:
        problems = [
            f"{node.nodeid} {problem}"
            for node in report.result
            if isinstance(node, pytest.Item) and (problem := marker_problem(node))
        ]
        if problems:
            report.outcome = "failed"
            report.longrepr = "tests that break the marker rule (tests/conftest.py):\n  " + "\n  ".join(problems)
            report.result = []
    return report


LONGEST_FIRST = TESTS / "longest_first.txt"


def longest_first() -> list[str]:
    """The test files tests/longest_first.txt names, longest first (comments and blank lines dropped)."""
    lines = (line.split("#", 1)[0].strip() for line in LONGEST_FIRST.read_text().splitlines())
    return [line for line in lines if line]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files tests/longest_first.txt names run first, in its order, and the rest after, as collected. `make test`
    hands whole files to two workers (`--dist loadfile --no-loadscope-reorder`), and a worker claims its next file
    while it still runs one: started last, a long file keeps one worker busy for minutes after the other ran out of
    files. pytest-xdist's own reorder puts files with the fewest tests last, and those are the longest here."""
    rank = {path: n for n, path in enumerate(longest_first())}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session", autouse=True)
def session_catalog_home() -> Generator[Path, None, None]:
    """The catalog (millpond.catalog) of this test worker: an engine a test starts opens it, starting millpond's
    PostgreSQL, and the project's own `catalog_home/` is not the tests'. In a folder `nobody` can enter (PostgreSQL
    runs as `nobody` under root), its server stopped when the worker ends."""
    from millpond.catalog import database

    parent = Path(tempfile.mkdtemp(prefix="millpond-catalog-"))
    parent.chmod(0o755)
    os.environ["MILLPOND_CATALOG_HOME"] = str(parent / "catalog")
    yield parent / "catalog"
    database.stop(lambda _: None)
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def engine_server(tmp_path_factory, request, session_catalog_home) -> Generator[dict, None, None]:
    """One engine (`millpond engine start`, a Spark Connect server) per test worker, started the first time a test
    asks for it and shared by every test of the worker that runs on the engine: the engine backend of the tests
    written for both backends (tests/support/backends.py), and every run in `make test-engine`.

    It is started on an object-store lake (a bucket of the worker's S3 server), so it has s3a's jars and settings and
    serves the tests' bucket lakes as well as their folder lakes (an engine started for a folder lake refuses a
    bucket lake's run). Its state file (with the token) lives in a folder of its own (XDG_STATE_HOME), as another
    user's or container's would. It writes Spark's event log (its `spark.eventLog.dir`, through a
    spark-defaults.conf of its own): what a test with a JVM of its own reads from that JVM's status store (e.g. the
    jobs it ran), a test on the engine reads there."""
    import subprocess

    from tests.support.stress import MILLPOND

    s3_server = request.getfixturevalue("s3_server")
    s3_server.create_bucket("test-engine")
    env = {
        k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MILLPOND_FAULT", "SPARK_CONNECT_MODE_ENABLED")
    }
    env |= {**s3_server.env(), "MILLPOND_LAKE": "s3a://test-engine/lake"}
    state = tmp_path_factory.mktemp("test-engine-state")
    env["XDG_STATE_HOME"] = str(state)  # its state file, out of ~/.local
    conf, events = tmp_path_factory.mktemp("test-engine-conf"), tmp_path_factory.mktemp("test-engine-events")
    (conf / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir {events.as_uri()}\n"
        "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n"  # one plain JSON-lines file
    )
    env["SPARK_CONF_DIR"] = str(conf)  # spark-submit reads its spark-defaults.conf; the pyspark wheel ships none
    started = subprocess.run([MILLPOND, "engine", "start"], env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    remote = started.stdout.strip().splitlines()[-1]
    # The same engine as `make up` gives it to Airflow (already up: the command only prints it)
    again = [MILLPOND, "engine", "start", "--airflow-connection"]
    connection = subprocess.run(again, env=env, capture_output=True, text=True, timeout=300)
    assert connection.returncode == 0 and "already up" in connection.stderr, connection.stderr[-3000:]
    (folder,) = (state / "millpond" / "engines").iterdir()  # millpond.lake.paths.engine_dir of its bucket lake
    yield {
        "remote": remote,
        "airflow_connection": connection.stdout.strip().splitlines()[-1],
        "env": env,
        "folder": folder,
        "log": folder / "engine.log",
        "bucket": "test-engine",
    }
    subprocess.run([MILLPOND, "engine", "stop"], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session", autouse=True)
def test_engine(request) -> Generator[str | None, None, None]:
    """MILLPOND_TEST_ENGINE=on (`make test-engine`): the worker's engine (`engine_server`) named by SPARK_REMOTE, so
    every run a test starts, as a process or in-process, goes to it. docs/engine.md says which suites pass this way.
    Off (`make test`): nothing."""
    from millpond import settings

    if settings.TEST_ENGINE.value() != "on":
        yield None
        return
    os.environ["SPARK_REMOTE"] = request.getfixturevalue("engine_server")["remote"]
    yield os.environ["SPARK_REMOTE"]
    os.environ.pop("SPARK_REMOTE", None)


@pytest.fixture(
    params=[pytest.param("own_jvm", marks=pytest.mark.own_jvm), "engine"],
)
def backend(request):
    """Where the test's runs execute (tests/support/backends.py): once in a JVM of their own, once on the worker's
    engine. The own-JVM half is `own_jvm` (`make test-engine` runs every test on the engine already)."""
    from tests.support.backends import OnEngine, OwnJvm

    if request.param == "engine":
        return OnEngine(request.getfixturevalue("engine_server"))
    return OwnJvm()


@pytest.fixture(scope="session")
def spark(test_engine) -> Generator:
    """The tests' own session (reading tables back): a local JVM, or with MILLPOND_TEST_ENGINE=on a session on the
    engine, since a process that has opened one Spark Connect session builds every later Column for Connect (pyspark
    switches its functions over for the whole process) and runs in-process tests start such sessions."""
    from millpond.driver.session import build_spark_session, connect_session

    session = connect_session(test_engine) if test_engine else build_spark_session("millpond-tests", 2)
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "lake"
    root.mkdir()
    monkeypatch.setenv("MILLPOND_LAKE", str(root))
    return root


@pytest.fixture(scope="session")
def kafka_broker():
    """A real Kafka broker (KRaft) for the session; a broker that cannot start fails the test, naming the fix."""
    from millpond.dev.kafka_broker import KafkaBroker

    broker = KafkaBroker().start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (s3proxy, tests/support/s3.py) for the session; one that cannot start fails the test."""
    from millpond.dev.s3_server import S3Server

    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    """A new bucket on the session's S3 server, with the AWS_* variables set to reach it."""
    from tests.support.s3 import new_bucket

    return new_bucket(s3_server, monkeypatch)
