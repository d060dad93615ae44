"""`millpond init`'s project and `millpond jars`' coordinates, without a JVM or the network."""

from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from millpond import cli
from millpond.driver import jars
from millpond.project import downloads
from millpond.project.scaffold import DEFAULT_PIPELINE, create_project
from millpond.spec import load_pipeline, validate_all

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
POM = "{http://maven.apache.org/POM/4.0.0}"


def pom_artifacts(pom: Path) -> list[downloads.Artifact]:
    return [
        downloads.Artifact(*(d.findtext(f"{POM}{tag}") or "" for tag in ("groupId", "artifactId", "version")))
        for d in ET.parse(pom).getroot().iter(f"{POM}dependency")
    ]


def test_millpond_jars_fetches_what_make_jars_and_make_report_assets_fetch():
    assert list(downloads.SPARK_JARS) == pom_artifacts(REPO / "build" / "jars.pom.xml")
    assert list(downloads.REPORT_ASSETS) == pom_artifacts(REPO / "build" / "report-assets.pom.xml")
    assert downloads.SPARK_JARS[0].url == (
        "https://repo1.maven.org/maven2/io/delta/delta-spark_4.2_2.13/4.4.0/delta-spark_4.2_2.13-4.4.0.jar"
    )


def test_a_download_that_does_not_match_its_published_sha1_is_refused(tmp_path, monkeypatch):
    served = {}
    for artifact in downloads.SPARK_JARS:
        served[artifact.url] = artifact.file_name.encode()
        served[f"{artifact.url}.sha1"] = hashlib.sha1(artifact.file_name.encode()).hexdigest().encode()
    served[f"{downloads.SPARK_JARS[1].url}.sha1"] = b"0" * 40
    monkeypatch.setattr(downloads, "_get", served.__getitem__)
    with pytest.raises(downloads.DownloadError, match=r"delta-storage-4.4.0.jar: SHA-1 .* Fix: run `millpond jars`"):
        downloads.fetch_spark_jars(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["delta-spark_4.2_2.13-4.4.0.jar"]  # whole files only


def test_the_scaffolded_dag_file_is_the_example_projects():
    template = REPO / "millpond" / "project" / "templates" / "millpond_pipelines.py"
    assert template.read_text() == (REPO / "dags" / "millpond_pipelines.py").read_text()


def test_init_writes_a_project_whose_spec_and_suite_validate(tmp_path, monkeypatch):
    project = tmp_path / "lakehouse"
    assert cli.main(["init", str(project), "--pipeline", "orders"]) == 0
    found = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert found == [
        ".gitignore",
        "README.md",
        "dags/millpond_pipelines.py",
        "expectations/orders.silver.orders.json",
        "pipelines/orders.yaml",
        "spark_jobs/__init__.py",
    ]
    monkeypatch.chdir(project)
    monkeypatch.delenv("MILLPOND_PROJECT", raising=False)  # a DAG file parsed earlier in this process sets it
    pipelines, problems = validate_all()
    assert problems == [] and [p.name for p in pipelines] == ["orders"]
    pipeline = load_pipeline("orders")
    assert list(pipeline.tables) == ["bronze.orders", "silver.orders", "gold.orders_per_device"]
    assert pipeline.tables["silver.orders"].expectations == "orders.silver.orders"
    assert json.loads((project / "expectations" / "orders.silver.orders.json").read_text())["name"] == (
        "orders.silver.orders"
    )
    assert {"lake/", ".cache/"} <= set((project / ".gitignore").read_text().split())
    readme = (project / "README.md").read_text()
    assert "millpond run orders" in readme and "airflow dags test orders" in readme and "$" + "$" not in readme


def test_generate_lands_sample_recordings_for_the_scaffolded_pipeline(tmp_path, monkeypatch, capsys):
    create_project(tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    for name in ("MILLPOND_LAKE", "MILLPOND_PROJECT", "MILLPOND_PIPELINES"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["generate", DEFAULT_PIPELINE, "--files", "2", "--rows", "5"]) == 0
    landed = sorted((tmp_path / "p" / "lake" / "landing" / DEFAULT_PIPELINE).glob("*.json"))
    assert len(landed) == 2 and all(len(f.read_text().splitlines()) == 5 for f in landed)
    assert cli.main(["generate", "nope"]) == 2
    assert "no sample generator for 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("existing", "pipeline", "message"),
    [
        ("notes.txt", DEFAULT_PIPELINE, r"is not empty; .* Fix: name a new folder"),
        (None, "Orders-2", r"pipeline name 'Orders-2' is not allowed. Fix: "),
    ],
)
def test_init_refuses_a_folder_with_files_or_a_bad_name(tmp_path, capsys, existing, pipeline, message):
    if existing:
        (tmp_path / existing).write_text("mine")
    assert cli.main(["init", str(tmp_path), "--pipeline", pipeline]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ([existing] if existing else [])


def test_an_installed_wheel_uses_its_bundled_functions_jar(tmp_path, monkeypatch):
    (tmp_path / "delta-spark_4.2_2.13-4.4.0.jar").write_bytes(b"")
    bundled = tmp_path / "wheel" / jars.FUNCTIONS_JAR
    bundled.parent.mkdir()
    bundled.write_bytes(b"")
    monkeypatch.setenv("MILLPOND_JARS", str(tmp_path))
    monkeypatch.setattr(jars, "BUNDLED_FUNCTIONS_JAR", bundled)
    assert jars.spark_jars() == [str(tmp_path / "delta-spark_4.2_2.13-4.4.0.jar"), str(bundled)]
    (tmp_path / jars.FUNCTIONS_JAR).write_bytes(b"")  # a jar folder's own build wins (a checkout's `make jvm`)
    assert str(bundled) not in jars.spark_jars()


def test_every_package_folder_has_an_init_so_spark_submit_can_import_it_from_a_zip():
    """spark-submit's --py-files zip (airflow/factory.build_py_files) cannot import a namespace package."""
    package = REPO / "millpond"
    folders = {p.parent for p in package.rglob("*.py") if "__pycache__" not in p.parts and "templates" not in p.parts}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []
