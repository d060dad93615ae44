"""A real S3-compatible server on this machine: s3proxy 3.0.0, no Docker.

Runs the self-contained jar `make s3proxy` fetched from Maven Central (`build/s3proxy.pom.xml`):
`java -jar s3proxy-3.0.0-jar-with-dependencies.jar --properties FILE`, bound to 127.0.0.1. 3.0.0 honours conditional
PUTs (`If-None-Match: *`, `If-Match: <etag>`), which the pipeline lease needs (millpond/lake/lease.py).

The backend is jclouds's in-memory `transient` store: the one of 3.0.0's backends that answers the way S3 does for
what hadoop-aws relies on (docs/object-storage.md). `filesystem-nio2` answers a HEAD of `dir` with 200 when only
`dir/` exists, so s3a takes a directory for a file (Delta's first commit failed: "Path is a file:
.../_delta_log/_staged_commits"); the older `filesystem` backend leaves an empty directory's marker out of its
listing, so s3a cannot find a streaming checkpoint's fresh `sources/0`. The objects therefore live as long as the
server: the tests start one per session, and `make s3-down` empties the local one.

Credentials are generated for each start and given to the server in a properties file that is readable by this user
only, lives in a private temporary folder outside the project, and is deleted once the server has read it: nothing
secret is written under the project. Clients get them as the standard `AWS_*` variables (`S3Server.env()`).

Two uses. The tests' session server: a free localhost port, its log in a temporary folder deleted on stop. The local
server for trying an s3a:// lake (`make s3-up` / `make s3-down`): port 9000 unless S3_PORT, its log in `.cache/s3`,
one bucket (`millpond` unless S3_BUCKET) created, running in the background; `up` prints the variables to export:

    python -m millpond.dev.s3_server up [--port 9000] [--bucket millpond]
    python -m millpond.dev.s3_server down
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from millpond import process_env, settings
from millpond.dev import process_group
from millpond.dev.kafka_broker import free_port
from millpond.lake.object_store import S3Access, client

JAR_DIR = settings.cache_dir() / "s3proxy"
JAR_NAME = "s3proxy-3.0.0-jar-with-dependencies.jar"
LOCAL_HOME = settings.cache_dir() / "s3"  # the local server's log and process-group file
LOCAL_PORT = 9000
LOCAL_BUCKET = "millpond"
REGION = "us-east-1"  # s3proxy accepts any region in a signature; clients need one to sign with
# A small JVM: it holds a few thousand small objects in memory and shares two cores with Spark.
JVM = ["-Xmx512m", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


REQUEST_LINE = re.compile(r"request: Request\((GET|PUT|POST|HEAD|DELETE) (\S+)\)")


class ServerFailed(RuntimeError):
    """The server did not start; the message carries the fix or the log's tail."""


class S3Server:
    """One s3proxy JVM in its own process group; `stop()` ends it and deletes its folder."""

    def __init__(self, workdir: Path | None = None, port: int | None = None, log_requests: bool = False):
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="millpond-s3-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.log = self.workdir / "s3proxy.log"
        self.process: subprocess.Popen | None = None
        self.log_requests = log_requests  # s3proxy's debug log names every request: see requests()
        # Letters and digits only: an access key travels in the Authorization header unescaped.
        self.access_key = "MP" + secrets.token_hex(9).upper()
        self.secret_key = secrets.token_urlsafe(30)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard variables an S3 client (boto3, hadoop-aws, delta-rs) reads to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
        }

    @staticmethod
    def jar() -> Path:
        jar = JAR_DIR / JAR_NAME
        if not jar.is_file():
            raise ServerFailed(f"s3proxy not found at {jar}. Fix: make s3proxy (needs Java and Maven)")
        return jar

    def _properties(self) -> str:
        return "\n".join(
            [
                f"s3proxy.endpoint={self.endpoint}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={self.access_key}",
                f"s3proxy.credential={self.secret_key}",
                "jclouds.provider=transient",  # in memory: see the module docstring
                # The backend's own login: the in-memory store ignores it, jclouds requires one.
                "jclouds.identity=millpond",
                "jclouds.credential=millpond",
            ]
        )

    def start(self, timeout: float = 90) -> S3Server:
        """Start the JVM and wait until it answers HTTP; on failure stop and raise with the log."""
        jar = self.jar()
        private = Path(tempfile.mkdtemp(prefix="millpond-s3proxy-"))  # 0700, outside the project
        properties = private / "s3proxy.properties"
        properties.touch(mode=0o600)
        properties.write_text(self._properties() + "\n")
        try:
            with self.log.open("w") as log:
                self.process = subprocess.Popen(
                    ["java", *JVM, "-jar", str(jar), "--properties", str(properties)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=process_env.child(
                        {"LOG_LEVEL": "debug" if self.log_requests else "warn", "JETTY_LOG_LEVEL": "warn"}
                    ),
                )
            self._wait(timeout)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        return self

    def _wait(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop(keep_log=True)
                raise ServerFailed(
                    f"s3proxy exited {self.process.returncode} while starting; log {self.log}:\n{self.log_tail()}"
                )
            if self.answers():
                return
            time.sleep(0.3)
        tail = self.log_tail()
        self.stop(keep_log=True)
        raise ServerFailed(f"s3proxy did not answer within {timeout:.0f} s; log {self.log}:\n{tail}")

    def answers(self) -> bool:
        """Whether an HTTP server answers at the endpoint (an unsigned request gets 403: that is an answer)."""
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def create_bucket(self, name: str) -> None:
        """Create a bucket through the S3 API (an existing one is fine)."""
        s3 = client(S3Access.from_mapping(self.env()))
        try:
            s3.create_bucket(Bucket=name)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass

    def requests(self) -> list[tuple[str, str]]:
        """Every request served so far as (method, path and query), in order, from the debug log of a server
        started with `log_requests=True`: what a client really sent, whichever of its parts sent it."""
        if not self.log_requests:
            raise ServerFailed("requests are logged only by a server started with log_requests=True")
        found = REQUEST_LINE.findall(self.log.read_text(errors="replace"))
        return [(method, url.split(str(self.port), 1)[1]) for method, url in found]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, keep_log: bool = False) -> None:
        """SIGTERM, SIGKILL after 20 s (the objects go with it); then the folder goes (kept on a failed start)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)
        if not keep_log:
            shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- the local server


def up(home: Path = LOCAL_HOME, port: int = LOCAL_PORT, bucket: str = LOCAL_BUCKET) -> S3Server | None:
    """Start the local server in the background with fresh credentials, create the bucket, print the exports.

    None if it already runs: its credentials were printed when it started and are kept nowhere, so a new set
    needs `down` then `up` (which empties it).
    """
    pgid_file = home / "s3proxy.pgid"
    server = S3Server(home, port)
    if pgid_file.exists() and process_group.alive(int(pgid_file.read_text())):
        print(
            f"the local S3 server already runs on {server.endpoint}; its credentials were printed when it started "
            "and are stored nowhere. For a new set (and an empty store): make s3-down && make s3-up"
        )
        return None
    if server.answers():
        raise ServerFailed(f"port {port} is taken by another process. Fix: make s3-up S3_PORT=<free port>")
    server.start()
    assert server.process is not None  # start() returns with the server's process, or raises
    pgid_file.write_text(str(server.process.pid))
    server.create_bucket(bucket)
    print(f"the local S3 server (s3proxy) runs on {server.endpoint}, objects in memory until make s3-down")
    print("  # paste these into your shell (never into a file under git):")
    for name, value in server.env().items():
        print(f"  export {name}={value}")
    print(f"  # a lake there is s3a://{bucket}/lake (what works on it today: docs/object-storage.md)")
    return server


def down(home: Path = LOCAL_HOME) -> bool:
    """Stop the local server (SIGTERM, SIGKILL after 20 s) and so empty it. False if none was running."""
    return process_group.stop(home / "s3proxy.pgid", grace_seconds=20, poll_seconds=0.3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m millpond.dev.s3_server", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--port", type=int, default=int(os.environ.get("S3_PORT") or LOCAL_PORT))
    parser.add_argument("--bucket", default=os.environ.get("S3_BUCKET") or LOCAL_BUCKET)
    parser.add_argument("--home", type=Path, default=LOCAL_HOME)
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            up(args.home, args.port, args.bucket)
        else:
            print("the local S3 server stopped" if down(args.home) else "no local S3 server was running")
    except ServerFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
