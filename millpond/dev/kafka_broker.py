"""A real Apache Kafka broker on this machine: KRaft combined mode (broker + controller in one JVM), no Docker.

Runs from the jars `make kafka-broker` fetched from Maven Central (`build/kafka-broker.pom.xml`): storage formatted
by Kafka's StorageTool, then `java -cp '.cache/kafka-broker/*' kafka.Kafka server.properties`. Topics are created
with Kafka's own TopicCommand; messages go in and out through Spark's Kafka connector (`produce`, `consume`).

Two uses. The tests' session broker: two free localhost ports, data and log in a temporary folder deleted on stop.
The local broker for trying the Kafka pipelines (`make kafka-up` / `make kafka-down`): a fixed port (9092 unless
KAFKA_PORT), data kept in `.cache/kafka` between restarts (a table's checkpoint holds offsets into it), running in
the background, and every topic the specs in pipelines/ read or write created (2 partitions):

    python -m millpond.dev.kafka_broker up [--port 9092]   # prints export MILLPOND_KAFKA_BOOTSTRAP=127.0.0.1:9092
    python -m millpond.dev.kafka_broker down
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from millpond import process_env, settings
from millpond.dev import process_group
from millpond.spec import KafkaSource, SpecError, load_pipeline

if TYPE_CHECKING:  # annotations only: a DAG file imports nothing of Spark
    from pyspark.sql import Row, SparkSession


JARS = settings.cache_dir() / "kafka-broker"
LOCAL_HOME = settings.cache_dir() / "kafka"  # the local broker's data, log and process-group file
LOCAL_PORT = 9092
TOPIC_PARTITIONS = 2
# A small JVM: the tests send thousands of messages, and the broker shares two cores with Spark.
JVM = ["-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
STARTED = "Kafka Server started"  # what KafkaRaftServer logs once broker and controller serve


class BrokerFailed(RuntimeError):
    """The broker did not start or a tool failed; the message carries the fix or the log's tail."""


def cluster_id(raw: bytes) -> str:
    """A KRaft cluster id (16 bytes, URL-safe base64) that never starts with '-': the storage tool would read
    `-tVC...` as an option and refuse to format (1 start in 64 failed that way). Kafka's own Uuid avoids it too."""
    first_cleared = bytes([raw[0] & 0x7F]) + raw[1:]  # the first base64 letter is then A-Z or a-f
    return base64.urlsafe_b64encode(first_cleared).decode().rstrip("=")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class KafkaBroker:
    """One broker+controller JVM in its own process group; `stop()` ends it and deletes its folder."""

    def __init__(self, workdir: Path | None = None, port: int | None = None):
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="millpond-kafka-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A fixed port keeps its controller on the next one, so a restarted broker finds its quorum where it was.
        self.port, self.controller_port = (port, port + 1) if port else (free_port(), free_port())
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
        done = subprocess.run(
            ["java", *JVM, "-cp", self.classpath(), main, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=process_env.child({"LOG_DIR": str(self.workdir)}),
        )
        if done.returncode != 0:
            raise BrokerFailed(
                f"{main} {' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def write_config(self) -> Path:
        config = self.workdir / "server.properties"
        config.write_text(
            "\n".join(
                [
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
                ]
            )
            + "\n"
        )
        return config

    def start(self, timeout: float = 120) -> KafkaBroker:
        """Format the storage, start the JVM and wait until it serves; on failure stop and raise with the log."""
        config = self.write_config()
        cluster = cluster_id(uuid.uuid4().bytes)
        self.java(
            "kafka.tools.StorageTool", "format", "--cluster-id", cluster, "--config", str(config), "--ignore-formatted"
        )
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                ["java", *JVM, "-cp", self.classpath(), "kafka.Kafka", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop(keep_log=True)
                raise BrokerFailed(
                    f"the Kafka broker exited {self.process.returncode} while starting; log "
                    f"{self.log}:\n{self.log_tail()}"
                )
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

    def create_topic(self, topic: str, partitions: int = 1, if_not_exists: bool = False) -> None:
        self.java(
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            self.bootstrap,
            "--create",
            "--topic",
            topic,
            "--partitions",
            str(partitions),
            "--replication-factor",
            "1",
            *(["--if-not-exists"] if if_not_exists else []),
        )

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


def produce(
    spark: SparkSession, bootstrap: str, topic: str, messages: list[tuple[int | None, bytes | None, bytes | None]]
) -> None:
    """Send (partition, key, value) messages with Spark's batch Kafka writer, in list order within a partition.

    A partition of None leaves it to Kafka's partitioner (the key's hash). A topic the broker does not have fails
    here, not after the writer's one-minute metadata wait.
    """
    if not topic_exists(spark, bootstrap, topic):
        raise BrokerFailed(
            f"topic {topic!r} does not exist on {bootstrap}. Fix: make kafka-up (it creates every "
            "topic the specs in pipelines/ name), or create it with Kafka's TopicCommand"
        )
    frame = spark.createDataFrame(
        [(topic, p, k, v) for p, k, v in messages], "topic STRING, partition INT, key BINARY, value BINARY"
    )
    frame.coalesce(1).write.format("kafka").option("kafka.bootstrap.servers", bootstrap).save()


def topic_exists(spark: SparkSession, bootstrap: str, topic: str) -> bool:
    """Whether the broker has the topic, asked through Spark's Kafka connector (a read of at most one message): the
    same on a JVM of the process's own and on an engine's Spark Connect session, which has no JVM to reach."""
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.request.timeout.ms", "10000")
        .option("kafka.default.api.timeout.ms", "15000")
        .option("fetchOffset.numRetries", "1")  # no broker: one 15 s wait, not three
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
    )
    try:
        reader.load().limit(1).collect()
    except Exception as error:  # py4j's or Spark Connect's wrapper of the Kafka client's exception
        lines = str(error).strip().splitlines() or [type(error).__name__]
        if any("UnknownTopicOrPartitionException" in line for line in lines):
            return False
        cause = next((line.strip(" :\t") for line in lines if "org.apache.kafka" in line), lines[0])
        raise BrokerFailed(
            f"no Kafka broker answers on {bootstrap}. Fix: make kafka-up, or set "
            f"MILLPOND_KAFKA_BOOTSTRAP to your cluster ({cause})"
        ) from error
    return True


def latest_event_time(spark: SparkSession, bootstrap: str, topic: str) -> datetime | None:
    """The greatest `event_time` among the topic's JSON values (None for an empty topic)."""
    if not topic_exists(spark, bootstrap, topic):
        return None
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    latest = frame.selectExpr(
        "max(unix_seconds(to_timestamp(get_json_object(CAST(value AS STRING), '$.event_time')))) AS s"
    ).first()
    seconds = cast("Row", latest).s  # an aggregate without GROUP BY: always one row
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def consume(spark: SparkSession, bootstrap: str, topic: str) -> list[Row]:
    """Every message of the topic, from the earliest to the latest offset, as Rows (key, value, partition, offset)."""
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    return frame.selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
    ).collect()


# ---------------------------------------------------------------------------------------------- the local broker


def spec_topics() -> list[str]:
    """Every topic a spec in pipelines/ subscribes to or sends to (a broken spec is skipped: `millpond validate`)."""
    topics: list[str] = []
    for spec in sorted(settings.pipelines_dir().glob("*.yaml")):
        try:
            pipeline = load_pipeline(spec)
        except SpecError:
            continue
        for source in pipeline.sources.values():
            if isinstance(source, KafkaSource):
                topics.extend(source.topics)
        topics.extend(t.sink.topic for t in pipeline.tables.values() if t.sink.is_kafka and t.sink.topic)
    return list(dict.fromkeys(topics))


def up(home: Path = LOCAL_HOME, port: int = LOCAL_PORT) -> KafkaBroker:
    """Start the local broker in the background (or find it running) and create the specs' topics."""
    pgid_file = home / "broker.pgid"
    broker = KafkaBroker(home, port)
    if pgid_file.exists() and process_group.alive(int(pgid_file.read_text())):
        if not broker.accepts():
            raise BrokerFailed(
                f"a broker of {home} runs (process group {pgid_file.read_text().strip()}) but not on "
                f"port {port}. Fix: make kafka-down, then make kafka-up KAFKA_PORT={port}"
            )
        print(f"the local Kafka broker already runs on {broker.bootstrap}")
    else:
        if broker.accepts():
            raise BrokerFailed(f"port {port} is taken by another process. Fix: make kafka-up KAFKA_PORT=<free port>")
        broker.start()
        assert broker.process is not None  # start() returns with the broker's process, or raises
        pgid_file.write_text(str(broker.process.pid))
        print(f"the local Kafka broker runs on {broker.bootstrap} (data and log in {home})")
    for topic in spec_topics():
        broker.create_topic(topic, TOPIC_PARTITIONS, if_not_exists=True)
        print(f"  topic {topic}")
    print(f"  export MILLPOND_KAFKA_BOOTSTRAP={broker.bootstrap}")
    return broker


def down(home: Path = LOCAL_HOME) -> bool:
    """Stop the local broker (SIGTERM, SIGKILL after 30 s); its data stays. False if none was running."""
    return process_group.stop(home / "broker.pgid", grace_seconds=30, poll_seconds=0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m millpond.dev.kafka_broker", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--port", type=int, default=int(os.environ.get("KAFKA_PORT") or LOCAL_PORT))
    parser.add_argument("--home", type=Path, default=LOCAL_HOME)
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            up(args.home, args.port)
        else:
            print("the local Kafka broker stopped" if down(args.home) else "no local Kafka broker was running")
    except BrokerFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
