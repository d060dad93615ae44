"""millpond/settings.py is the one list of MILLPOND_* variables: its generated page is current, nothing reads a
variable it does not declare, and a project is found from wherever a command runs."""

from __future__ import annotations

import re

import pytest

from millpond import settings
from tests.support import REPO

pytestmark = pytest.mark.unit

REGENERATE = "python -m millpond.settings > docs/configuration.md"


def test_the_configuration_page_is_generated_from_the_settings():
    page = REPO / "docs" / "configuration.md"
    assert page.is_file(), f"docs/configuration.md is missing. Fix: run `{REGENERATE}`"
    assert page.read_text() == settings.configuration_markdown(), (
        f"docs/configuration.md differs from millpond/settings.py. Fix: run `{REGENERATE}`"
    )


def test_every_variable_the_package_names_is_declared_in_settings():
    declared = {setting.name for setting in settings.ALL}
    named: dict[str, set[str]] = {}
    for path in sorted((REPO / "millpond").rglob("*.py")):
        for name in re.findall(r"\bMILLPOND_[A-Z0-9][A-Z0-9_]*", path.read_text()):
            named.setdefault(name, set()).add(str(path.relative_to(REPO)))
    undeclared = {name: sorted(files) for name, files in named.items() if name not in declared}
    assert not undeclared, f"named but not in settings.ALL (declare each in millpond/settings.py): {undeclared}"
    assert len(declared) == len(settings.ALL), "a variable is declared twice in settings.ALL"


def test_the_project_is_the_nearest_folder_holding_pipelines(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.PROJECT.name, raising=False)
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    (outer / "pipelines").mkdir(parents=True)
    (inner / "pipelines").mkdir(parents=True)
    (inner / "dags" / "deep").mkdir(parents=True)
    for cwd, root in ((inner / "dags" / "deep", inner), (inner, inner), (outer / "pipelines", outer)):
        monkeypatch.chdir(cwd)
        assert settings.project_root() == root.resolve()
    monkeypatch.setenv(settings.PROJECT.name, str(outer))
    monkeypatch.chdir(inner)
    assert settings.project_root() == outer.resolve()  # MILLPOND_PROJECT wins over the search
