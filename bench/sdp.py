"""B8's peer: the activity pipeline run by Spark Declarative Pipelines (`spark-pipelines run`, pyspark's own CLI).

The pipeline is bench/sdp_pipeline/ (a spec template and its Python definitions). Each side is a folder of its own:

    <home>/conf/spark-defaults.conf   Delta, a Hive catalog on Derby under <home> (SDP keeps its tables' state in the
                                      catalog between runs), millpond's session settings; read by every JVM here
    <home>/warehouse/<db>.db/<table>  the Delta tables
    <home>/<project>/                 the rendered spec, a copy of transformations/, the streaming checkpoints

Cold, every run is `spark-pipelines --remote local[2] run`: a JVM of its own (spark-submit, which starts a Connect
server in-process for the CLI). Warm, `spark-pipelines --remote sc://localhost:<port> run` against a Connect server
already started here with the same conf folder. `--conf` values reach the server only partly in pyspark 4.2, so every
setting is in spark-defaults.conf.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.data import REPO
from bench.probe import Measured, measure

PIPELINE = REPO / "bench" / "sdp_pipeline"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
TABLES = {
    "bronze": "bronze_activity",
    "silver": "silver_activity",
    "device_counts": "gold_device_counts",
    "activity_hourly": "gold_activity_hourly",
}


def spark_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


class Sdp:
    def __init__(self, home: Path):
        self.home = home
        self.server: subprocess.Popen | None = None
        self.port = 0

    def prepare(self) -> None:
        """A fresh home: its conf folder, warehouse and metastore."""
        from millpond.driver import jars
        from millpond.driver.spark_conf import LISTING_THRESHOLD, LOCAL_LISTING_THRESHOLD, base_conf

        shutil.rmtree(self.home, ignore_errors=True)
        (self.home / "conf").mkdir(parents=True)
        conf = {
            **base_conf(),
            "spark.jars": ",".join(jars.spark_jars()),
            "spark.ui.enabled": "false",
            "spark.driver.memory": os.environ.get("MILLPOND_DRIVER_MEMORY", "2g"),
            "spark.sql.shuffle.partitions": "2",
            LISTING_THRESHOLD: str(LOCAL_LISTING_THRESHOLD),
            "spark.sql.catalogImplementation": "hive",
            "spark.sql.warehouse.dir": str(self.home / "warehouse"),
            "spark.sql.sources.default": "delta",
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={self.home / 'metastore_db'};create=true"
            ),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.home}",
        }
        lines = [f"{key} {value}" for key, value in conf.items()]
        (self.home / "conf" / "spark-defaults.conf").write_text("\n".join(lines) + "\n")

    def env(self) -> dict[str, str]:
        return {
            "SPARK_CONF_DIR": str(self.home / "conf"),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        }

    def project(self, name: str, landing: Path) -> Path:
        """The pipeline rendered for one lake: a database of its own in this home's catalog (created here when a
        server is up; a cold side uses a fresh home per lake, and its `default` database)."""
        if self.server:
            self.sql(f"CREATE DATABASE IF NOT EXISTS {name}")
        else:
            name = "default"
        folder = self.home / name
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(PIPELINE / "transformations", folder / "transformations")
        spec = (PIPELINE / "spark-pipeline.yml").read_text()
        values = {"storage": (folder / "storage").as_uri(), "database": name, "landing": str(landing)}
        for key, value in values.items():
            spec = spec.replace("{" + key + "}", value)
        (folder / "spark-pipeline.yml").write_text(spec)
        return folder / "spark-pipeline.yml"

    def tables(self, spec: Path) -> dict[str, Path]:
        name = spec.parent.name
        database = self.home / "warehouse" / ("" if name == "default" else f"{name}.db")
        return {ours: database / theirs for ours, theirs in TABLES.items()}

    def sql(self, statement: str) -> None:
        """One statement on the running server, from a Connect client of its own (not timed)."""
        code = (
            "import sys; from pyspark.sql import SparkSession;"
            "spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); spark.sql(sys.argv[2]).collect()"
        )
        subprocess.run(
            [sys.executable, "-c", code, f"sc://localhost:{self.port}", statement],
            env={**os.environ, **self.env()},
            check=True,
            capture_output=True,
        )

    def run(self, spec: Path) -> Measured:
        remote = f"sc://localhost:{self.port}" if self.server else "local[2]"
        return measure([spark_bin("spark-pipelines"), "--remote", remote, "run", "--spec", str(spec)], self.env())

    def start_server(self, timeout: float = 180) -> float:
        """A Connect server on this home's conf, bound to 127.0.0.1: what `--remote sc://...` runs on. Seconds."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        started = time.perf_counter()
        command = [
            spark_bin("spark-submit"),
            "--master",
            "local[2]",
            "--class",
            SERVER_CLASS,
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            "spark-internal",
        ]
        log = open(self.home / "server.log", "ab")  # noqa: SIM115 - the server outlives this call
        self.server = subprocess.Popen(
            command,
            cwd=self.home,
            env={**os.environ, **self.env()},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return time.perf_counter() - started
            except OSError:
                if self.server.poll() is not None or time.perf_counter() - started > timeout:
                    self.stop_server()
                    raise RuntimeError(f"SDP's Connect server did not start; see {self.home / 'server.log'}") from None
                time.sleep(0.5)

    def stop_server(self) -> None:
        if self.server is None:
            return
        try:
            os.killpg(self.server.pid, signal.SIGTERM)
            self.server.wait(timeout=60)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()
        self.server = None
