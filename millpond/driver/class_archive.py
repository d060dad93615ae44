"""A class-data archive of the classes a run's driver JVM loads (HotSpot's AppCDS), so that the next JVM maps them
instead of reading, parsing and verifying them from Spark's jars again.

Why: a run with a JVM of its own spends seconds of every start loading the same ten thousand classes (Spark, Delta,
Hadoop, Jackson), and the planning of its first queries loads more: about a quarter of a small increment's run
on two cores (docs/benchmarks.md, "The class-data archive"). Every run, Airflow task and engine pays that start.

How: `millpond class-archive` (run by `make setup`; millpond.project.class_archive_build) runs a
small pipeline of its own in a JVM started with `-XX:ArchiveClassesAtExit` (JDK 13+, a dynamic archive on top of
the JDK's own), checks that a JVM starts on the result with `-Xshare:on`, and only then moves it into place. A
run's driver then starts with
`-XX:SharedArchiveFile`. HotSpot checks that the archive matches the JVM and the classpath and maps it only then;
otherwise it starts without it (`-Xshare:auto`, its default), as if it were not there. The archive is keyed by what
it depends on (the java binary, Spark's jars, the conf folder on the classpath), so a `pip install` of another
pyspark or another JDK makes runs start without it until it is built again. A classpath that adds jars in front of
Spark's (an object-store lake's s3a jars) gets no archive. Classes change no result: `MILLPOND_CLASS_ARCHIVE=off`
is the standard path, and tests/integration/speedups/test_speedups_equal.py compares the two.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from millpond import settings
from millpond.driver.speedups import CLASS_ARCHIVE

# Imported inside functions: pyspark only to find its jars: the Airflow modules import this one (through connect_server)
# at every DAG parse, where pyspark is not wanted.

LOG_OFF = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # HotSpot's notes on classes it leaves out go to stdout otherwise


def java_binary() -> Path | None:
    """The java Spark's launcher starts: JAVA_HOME's, else the first on PATH (bin/spark-class does the same)."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found else None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def archive_path(extra_classpath: str = "") -> Path | None:
    """Where the archive for this JVM and classpath lives (it may not exist yet); None without a java."""
    java = java_binary()
    if java is None:
        return None
    key = hashlib.sha256()
    stat = java.stat()
    key.update(f"{java}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    jars = spark_home() / "jars"
    for jar in sorted(jars.glob("*.jar")):
        key.update(f"{jar.name}|{jar.stat().st_size}\n".encode())
    key.update(f"conf={os.environ.get('SPARK_CONF_DIR', '')}|extra={extra_classpath}\n".encode())
    return settings.cache_dir() / "class-archive" / f"driver-{key.hexdigest()[:16]}.jsa"


def driver_options(extra_classpath: str = "") -> str:
    """The driver JVM options that map the archive, or "" (switched off, not built, or a classpath it cannot match).
    Raises SpecError for a MILLPOND_CLASS_ARCHIVE that is neither on nor off."""
    if not CLASS_ARCHIVE.enabled() or extra_classpath:
        return ""
    path = archive_path()
    if path is None or not path.is_file() or " " in str(path):  # Spark splits extraJavaOptions at spaces
        return ""
    return f"-XX:SharedArchiveFile={path} {LOG_OFF}"
