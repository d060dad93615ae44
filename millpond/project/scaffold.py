"""`millpond init`: a new project folder with one small but real pipeline, its gate, its DAG file and a README.

The pipeline reads the record shape of millpond's sample recordings (`RECORD_SCHEMA`), so `millpond generate`
can land data for it at once and the first `millpond run` has something to drain.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).resolve().parent / "templates"
# The spec loader's rule for pipeline names (a name is also a DAG id, a table id's second half and a folder name).
PIPELINE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
DEFAULT_PIPELINE = "recordings"
# The columns millpond.dev.sample_data.activity_files writes, as the scaffolded spec declares them.
RECORD_SCHEMA = (
    "Recorded_At TIMESTAMP, Device STRING, Index BIGINT, Model STRING, User STRING, gt STRING, x DOUBLE, y DOUBLE, "
    "z DOUBLE"
)


class ScaffoldError(ValueError):
    """The project cannot be written where or as asked; the message names the fix."""


def project_files(pipeline: str) -> dict[str, str]:
    """Each file of a new project (path relative to the project folder -> text)."""
    suite = f"{pipeline}.silver.{pipeline}"
    names = {"pipeline": pipeline, "suite": suite}

    def render(template: str) -> str:
        return Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(names)

    return {
        f"pipelines/{pipeline}.yaml": render("pipeline.yaml"),
        f"expectations/{suite}.json": render("suite.json"),
        # The same DAG file as millpond's own example project: every spec in pipelines/ becomes a DAG.
        "dags/millpond_pipelines.py": (TEMPLATES / "millpond_pipelines.py").read_text(encoding="utf-8"),
        "spark_jobs/__init__.py": '"""This project\'s Python transforms: a spec names one as `spark_jobs.module:function`."""\n',
        ".gitignore": (TEMPLATES / "gitignore").read_text(encoding="utf-8"),
        "README.md": render("README.md"),
    }


def create_project(folder: Path, pipeline: str = DEFAULT_PIPELINE) -> list[Path]:
    """Write a new project into `folder` (created if missing), refusing one that holds anything."""
    if not PIPELINE_NAME.fullmatch(pipeline):
        raise ScaffoldError(
            f"pipeline name {pipeline!r} is not allowed. Fix: use lower-case letters, digits and underscores, "
            "starting with a letter (e.g. --pipeline orders)"
        )
    if folder.exists() and not folder.is_dir():
        raise ScaffoldError(f"{folder} is a file. Fix: name a new or empty folder")
    if folder.is_dir() and any(folder.iterdir()):
        raise ScaffoldError(
            f"{folder} is not empty; millpond init writes only into a new or empty folder, so nothing of yours is "
            "overwritten. Fix: name a new folder (e.g. `millpond init my-lakehouse`)"
        )
    written = []
    for relative, text in project_files(pipeline).items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def has_record_schema(schema: str | None) -> bool:
    """Whether a source's declared schema is the sample recordings' (whitespace aside): `millpond generate` can
    land data for it."""
    return schema is not None and " ".join(schema.split()) == " ".join(RECORD_SCHEMA.split())
