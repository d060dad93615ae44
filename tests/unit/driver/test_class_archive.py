"""When a run's driver JVM maps the class-data archive and when it must not: switched off, not built, a classpath
the archive was not made for, or a JDK, Spark or conf folder other than the one it was built with."""

from __future__ import annotations

import pytest

from millpond.driver import class_archive
from millpond.spec import SpecError

pytestmark = pytest.mark.unit


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("MILLPOND_PROJECT", str(tmp_path))
    monkeypatch.delenv("MILLPOND_CLASS_ARCHIVE", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    return tmp_path


def built(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    return path


def test_a_built_archive_is_mapped_with_hotspots_notes_silenced(project):
    assert class_archive.driver_options() == ""  # not built yet: the JVM starts as it always did
    path = built(class_archive.archive_path())
    assert path.is_relative_to(project / ".cache" / "class-archive")
    assert class_archive.driver_options() == f"-XX:SharedArchiveFile={path} {class_archive.LOG_OFF}"


def test_switched_off_or_a_classpath_in_front_of_sparks_gets_no_archive(project, monkeypatch):
    built(class_archive.archive_path())
    assert class_archive.driver_options(extra_classpath="/opt/s3a/hadoop-aws.jar") == ""
    monkeypatch.setenv("MILLPOND_CLASS_ARCHIVE", "off")
    assert class_archive.driver_options() == ""
    monkeypatch.setenv("MILLPOND_CLASS_ARCHIVE", "maybe")
    with pytest.raises(SpecError, match="MILLPOND_CLASS_ARCHIVE='maybe' is neither on nor off"):
        class_archive.driver_options()


def test_another_conf_folder_or_java_is_another_archive(project, monkeypatch, tmp_path_factory):
    first = class_archive.archive_path()
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path_factory.mktemp("conf")))
    assert class_archive.archive_path() != first
    monkeypatch.delenv("SPARK_CONF_DIR")
    assert class_archive.archive_path() == first
    monkeypatch.setenv("JAVA_HOME", str(tmp_path_factory.mktemp("no-java")))
    monkeypatch.setenv("PATH", str(tmp_path_factory.mktemp("empty-path")))
    assert class_archive.archive_path() is None
    assert class_archive.driver_options() == ""
