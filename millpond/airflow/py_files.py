"""The zip spark-submit ships as `--py-files`: the executors of a cluster import millpond and the transforms from it.

On a cluster the executors do not share the task's virtualenv or project folder, so each task zips the installed
millpond package and the project's own packages its pipeline's transforms are imported from.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import millpond
from millpond import settings
from millpond.spec import Pipeline, load_pipeline


def build_py_files(pipeline: str) -> Path:
    """Zip the installed millpond package and the project's code the pipeline's transforms live in, for the
    executors of a cluster (atomic replace: concurrent tasks may build it)."""
    target = settings.cache_dir() / f"millpond-src-{pipeline}.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    package_dir = Path(millpond.__file__).resolve().parent
    project = settings.project_root()
    folders = [(package_dir, package_dir.parent)]
    for top in user_code_packages(load_pipeline(pipeline)):
        if (project / top).is_dir():
            folders.append((project / top, project))
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, base in folders:
            for file in sorted(folder.rglob("*.py")):
                archive.write(file, file.relative_to(base).as_posix())
    os.replace(tmp, target)
    return target


def user_code_packages(pipeline: Pipeline) -> set[str]:
    """The top-level packages of the project that a pipeline's transforms and stateful functions are imported from."""
    references = []
    for table in pipeline.tables.values():
        if table.transform and table.transform.function:
            references.append(table.transform.function)
        if table.stateful:
            references.append(table.stateful.function)
    return {reference.split(":")[0].split(".")[0] for reference in references}
