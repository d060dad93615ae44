"""A real Apache Kafka broker for the tests: KRaft combined mode (broker + controller in one JVM), no Docker.

Runs from the jars `make kafka-broker` fetched from Maven Central (`build/kafka-broker.pom.xml`): storage formatted
by Kafka's StorageTool, then `java -cp '.cache/kafka-broker/*' kafka.Kafka server.properties` on two free
localhost ports, its data and log in a temporary folder deleted on stop. Topics are created with Kafka's own
TopicCommand; tests produce and consume through Spark's Kafka connector (`produce`, `consume`).

    python -m tests.kafka_broker     # a broker in the foreground, for trying a spec by hand (Ctrl-C stops it)
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from millpond import paths

JARS = paths.REPO_ROOT / ".cache" / "kafka-broker"
# A small JVM: the tests send thousands of messages, and the broker shares two cores with Spark.
JVM = ["-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
STARTED = "Kafka Server started"  # what KafkaRaftServer logs once broker and controller serve


class BrokerFailed(RuntimeError):
    """The broker did not start or a tool failed; the message carries the fix or the log's tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class KafkaBroker:
    """One broker+controller JVM in its own process group; `stop()` ends it and deletes its folder."""

    def __init__(self, workdir: Path | None = None):
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="millpond-kafka-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = free_port(), free_port()
        self.process: subprocess.Popen | None = None
        self.log = self.workdir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def classpath(self) -> str:
        if not any(JARS.glob("kafka_2.13-*.jar")):
            raise BrokerFailed(f"Kafka broker jars not found in {JARS}. Fix: make kafka-broker (needs Java and Maven)")
        return f"{JARS}/*"

    def java(self, main: str, *args: str, timeout: float = 120) -> str:
        """Run one of Kafka's command-line classes; raise with its output if it fails."""
        done = subprocess.run(["java", *JVM, "-cp", self.classpath(), main, *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "LOG_DIR": str(self.workdir)})  # fmt: skip
        if done.returncode != 0:
            raise BrokerFailed(f"{main} {' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                               f"{done.stderr[-3000:]}")  # fmt: skip
        return done.stdout

    def write_config(self) -> Path:
        config = self.workdir / "server.properties"
        config.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.workdir / 'data'}",
            "num.partitions=1",
            "auto.create.topics.enable=false",  # a topic a test (or a spec) did not create is an error, not a guess
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "num.network.threads=2",
            "num.io.threads=2",
            "background.threads=2",
        ]) + "\n")  # fmt: skip
        return config

    def start(self, timeout: float = 120) -> KafkaBroker:
        """Format the storage, start the JVM and wait until it serves; on failure stop and raise with the log."""
        config = self.write_config()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.java("kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", str(config),
                  "--ignore-formatted")  # fmt: skip
        with self.log.open("w") as log:
            self.process = subprocess.Popen(["java", *JVM, "-cp", self.classpath(), "kafka.Kafka", str(config)],
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop(keep_log=True)
                raise BrokerFailed(f"the Kafka broker exited {self.process.returncode} while starting; log "
                                   f"{self.log}:\n{self.log_tail()}")  # fmt: skip
            if STARTED in self.log.read_text(errors="replace") and self.accepts():
                return self
            time.sleep(0.5)
        tail = self.log_tail()
        self.stop(keep_log=True)
        raise BrokerFailed(f"the Kafka broker did not start within {timeout:.0f} s; log {self.log}:\n{tail}")

    def accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        self.java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap, "--create",
                  "--topic", topic, "--partitions", str(partitions), "--replication-factor", "1")  # fmt: skip

    def stop(self, keep_log: bool = False) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after 30 s; then the folder goes (kept on a failed start)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        if not keep_log:
            shutil.rmtree(self.workdir, ignore_errors=True)


def produce(spark, bootstrap: str, topic: str, messages: list[tuple[int, bytes | None, bytes | None]]) -> None:
    """Send (partition, key, value) messages with Spark's batch Kafka writer, in list order within a partition."""
    frame = spark.createDataFrame([(topic, p, k, v) for p, k, v in messages],
                                  "topic STRING, partition INT, key BINARY, value BINARY")  # fmt: skip
    frame.coalesce(1).write.format("kafka").option("kafka.bootstrap.servers", bootstrap).save()


def consume(spark, bootstrap: str, topic: str) -> list:
    """Every message of the topic, from the earliest to the latest offset, as Rows (key, value, partition, offset)."""
    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())  # fmt: skip
    return frame.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition",
                            "offset").collect()  # fmt: skip


if __name__ == "__main__":
    broker = KafkaBroker().start()
    print(f"Kafka broker on {broker.bootstrap} (KRaft; data and log in {broker.workdir}); Ctrl-C stops it")
    print(f"  export MILLPOND_KAFKA_BOOTSTRAP={broker.bootstrap}")
    print(f"  create a topic: java -cp '{JARS}/*' org.apache.kafka.tools.TopicCommand --bootstrap-server "
          f"{broker.bootstrap} --create --topic <name> --partitions 3")
    try:
        while broker.process and broker.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
