"""The JVM artifacts a project fetches from Maven Central with `millpond jars`: no Maven, no checkout.

The coordinates are the ones `make jars` and `make report-assets` give Maven (build/jars.pom.xml,
build/report-assets.pom.xml); a test holds the two lists equal. Each file is checked against the SHA-1 Maven
Central publishes next to it and written under a temporary name, then renamed: a file that is there is whole and
verified, so a second `millpond jars` downloads nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
# The folder of a WebJar that holds its files; reports.py reads the report assets from under it.
WEBJARS = "META-INF/resources/webjars/"
TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Artifact:
    """One jar on Maven Central, as a pom's <dependency> names it."""

    group: str
    name: str
    version: str

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.version}.jar"

    @property
    def url(self) -> str:
        return f"{MAVEN_CENTRAL}{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.file_name}"


# Delta, Spark's Kafka connector with the runtime deps pip's pyspark lacks, and PostgreSQL's JDBC driver for the
# catalog (why these and not their transitive deps: build/jars.pom.xml). Copied as they are into the project's jar folder.
SPARK_JARS = (
    Artifact("io.delta", "delta-spark_4.2_2.13", "4.4.0"),
    Artifact("io.delta", "delta-storage", "4.4.0"),
    Artifact("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0"),
    Artifact("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "4.2.0"),
    Artifact("org.apache.kafka", "kafka-clients", "3.9.2"),
    Artifact("org.apache.commons", "commons-pool2", "2.13.1"),
    Artifact("org.postgresql", "postgresql", "42.7.14"),
)
# The stylesheets and scripts of the Data Docs pages, unpacked (META-INF/resources/webjars/**) into the project's
# report-assets folder. Without them a report still renders, loading them from CDNs (runs/reports.py).
REPORT_ASSETS = (
    Artifact("org.webjars", "bootstrap", "4.3.1"),
    Artifact("org.webjars", "jquery", "3.7.1"),
    Artifact("org.webjars.npm", "popper.js", "1.12.9"),
    Artifact("org.webjars", "font-awesome", "6.6.0"),
    Artifact("org.webjars.npm", "bootstrap-table", "1.19.1"),
    Artifact("org.webjars", "bootstrap-datepicker", "1.9.0"),
)


class DownloadError(RuntimeError):
    """An artifact could not be fetched or did not match its published checksum; the message names the fix."""


def fetch_spark_jars(folder: Path) -> list[Path]:
    """Every Spark jar in `folder`, downloading the ones not there yet."""
    folder.mkdir(parents=True, exist_ok=True)
    found = []
    for artifact in SPARK_JARS:
        target = folder / artifact.file_name
        if not target.is_file():
            _write_atomically(target, download(artifact))
        found.append(target)
    return found


def fetch_report_assets(folder: Path) -> Path:
    """The report assets unpacked under `folder` (as `make report-assets` leaves them); each WebJar once."""
    for artifact in REPORT_ASSETS:
        marker = folder / ".unpacked" / artifact.file_name  # not .fetched: `make report-assets`' marker file
        if marker.is_file():
            continue
        with zipfile.ZipFile(io.BytesIO(download(artifact))) as webjar:
            for member in webjar.infolist():
                if member.is_dir() or not member.filename.startswith(WEBJARS) or ".." in member.filename:
                    continue
                _write_atomically(folder / member.filename, webjar.read(member))
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return folder / WEBJARS


def download(artifact: Artifact) -> bytes:
    """The artifact's bytes, checked against the SHA-1 Maven Central publishes beside it."""
    published = _get(f"{artifact.url}.sha1").decode("ascii", "replace").split()
    content = _get(artifact.url)
    actual = hashlib.sha1(content).hexdigest()
    if not published or published[0].lower() != actual:
        raise DownloadError(
            f"{artifact.url}: SHA-1 {actual} does not match the published {published[0] if published else '(empty)'}. "
            "Fix: run `millpond jars` again; if it repeats, a proxy is altering downloads"
        )
    return content


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            return bytes(response.read())
    except (urllib.error.URLError, OSError) as error:
        raise DownloadError(
            f"could not download {url}: {error}. Fix: check the network (an HTTPS proxy is read from "
            "HTTPS_PROXY), or copy the jars into the jar folder yourself (MILLPOND_JARS names another one)"
        ) from None


def _write_atomically(target: Path, content: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(content)
    os.replace(tmp, target)
