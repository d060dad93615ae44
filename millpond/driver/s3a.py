"""Spark on an object-store lake: hadoop-aws's `s3a` filesystem, its jars and settings, used only when the lake is
`s3a://` (or `s3://`) so that a local lake's sessions start exactly as before.

The jars (hadoop-aws 3.5.0, the Hadoop version pyspark 4.2.0 ships, and the AWS SDK v2 bundle its POM names) live in
their own folder (`make s3a-jars`, MILLPOND_S3A_JARS): the bundle alone is about 600 MB, and loading it costs a local
run nothing only if it is not on the classpath.

Credentials never enter Spark's configuration: a session's settings become `--conf` arguments of the JVM's command
line, visible to every user of the machine. The JVM inherits `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
`AWS_SESSION_TOKEN` from this process's environment, and S3A's default credential chain (and Spark's own copy of
those variables into its Hadoop configuration, made inside the JVM) reads them there. Only the endpoint, region and
behaviour switches below are passed as settings.
"""

from __future__ import annotations

import os

from millpond import settings
from millpond.lake.object_store import S3Access, is_object_store

HADOOP_AWS = "hadoop-aws-3.5.0.jar"
SDK_BUNDLE_PREFIX = "bundle-2."
# Delta's log store for S3: millpond's (jvm/src/main/java/millpond/spark/ConditionalS3LogStore.java, in the
# functions jar every session and engine ships), which creates each commit file with `If-None-Match: *` so the store
# decides which of two writers of a version wins and the other retries above it. delta-storage's
# S3SingleDriverLogStore, which it extends, checks then PUTs, and silently overwrites a commit another machine made
# in between.
CONDITIONAL_LOG_STORE = "millpond.spark.ConditionalS3LogStore"
# Set on every session of an engine started for an object-store lake, never on a folder lake's: a run on a bucket
# lake reads it to refuse an engine without s3a (millpond.driver.session.connect_session).
S3A_LOG_STORE = "spark.delta.logStore.s3a.impl"


def lake_on_object_store() -> bool:
    """Whether MILLPOND_LAKE names an object store (read as written: a local path is never resolved here)."""
    return is_object_store(settings.LAKE.raw() or "")


def s3a_jars() -> list[str]:
    """hadoop-aws and what its POM names (`make s3a-jars`), or a clear error naming the fix."""
    folder = settings.s3a_jars_dir()
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    names = {os.path.basename(j) for j in jars}
    if HADOOP_AWS not in names or not any(n.startswith(SDK_BUNDLE_PREFIX) for n in names):
        raise RuntimeError(
            f"the lake is on object storage but hadoop-aws and the AWS SDK bundle are not in {folder}. Fix: in a "
            "millpond checkout run `make s3a-jars` (about 600 MB from Maven Central), or set MILLPOND_S3A_JARS to a "
            f"folder holding {HADOOP_AWS} and the AWS SDK v2 bundle its POM names"
        )
    return jars


def s3a_conf(access: S3Access | None = None) -> dict[str, str]:
    """The session settings for s3a and Delta on S3: never a credential (see the module docstring)."""
    access = access or S3Access.from_environment()
    conf = {
        # s3:// is the same store to millpond: both go through S3A (Hadoop has no s3:// filesystem of its own).
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": access.region,
        # Checksums only when an operation requires them: hadoop-aws 3.5's defaults, written down because the AWS
        # SDK's own default (a CRC on every request) is refused by S3-compatible servers such as s3proxy.
        "spark.hadoop.fs.s3a.checksum.generation": "false",
        "spark.hadoop.fs.s3a.request.md5.header": "true",
        S3A_LOG_STORE: CONDITIONAL_LOG_STORE,
        "spark.delta.logStore.s3.impl": CONDITIONAL_LOG_STORE,
    }
    if access.endpoint:  # an S3-compatible server: path-style addressing, plain http when its URL says so
        conf |= {
            "spark.hadoop.fs.s3a.endpoint": access.endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": str(not access.http).lower(),
        }
    if access.access_key:
        # Only the environment's keys: no probing of an instance-metadata service that is not there.
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
        )
    return conf


def launch_conf(master: str) -> dict[str, str]:
    """How the s3a jars reach a JVM this process launches for an object-store lake ({} for a local lake).

    Under a local master, the driver's own classpath: the executors run in the driver's JVM, and a jar in
    `spark.jars` would be copied into the run's temporary folder by the executor (600 MB per run). A cluster's
    executors get them through `spark.jars` instead."""
    if not lake_on_object_store():
        return {}
    found = s3a_jars()
    if master.startswith("local"):
        return {"spark.driver.extraClassPath": os.pathsep.join(found)}
    return {"spark.jars": ",".join(found)}


def session_conf() -> dict[str, str]:
    """The session settings for the lake: s3a's for an object-store lake, {} for a local one."""
    return s3a_conf() if lake_on_object_store() else {}


def engine_problem(log_store: str | None, engine: str) -> str | None:
    """Why an engine cannot serve this run's lake (None when it can): an object-store lake needs an engine started
    with s3a's jars and settings, which set Delta's s3a log store (`log_store`, as the engine's session has it)."""
    if not lake_on_object_store() or log_store is not None:
        return None
    return (
        f"the engine at SPARK_REMOTE {engine} was started for a folder lake, without s3a's jars and settings, and "
        f"this run's lake is {settings.LAKE.raw()}. Fix: start an engine on an object-store lake "
        "(`MILLPOND_LAKE=s3a://... millpond engine start`, with the AWS_* variables that reach it) and set "
        "SPARK_REMOTE to the value it prints"
    )
