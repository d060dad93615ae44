"""The marker rule and the file order of tests/conftest.py, on a throwaway test tree run by a real pytest: a test
that escapes the rule fails collection naming the test, so `make check` (`pytest -m unit`) can trust its selection;
the files tests/longest_first.txt names start first."""

from __future__ import annotations

import shutil

import pytest

from tests.support import REPO

pytestmark = pytest.mark.unit


@pytest.fixture
def tree(pytester: pytest.Pytester) -> pytest.Pytester:
    """tests/ with this repo's conftest.py and support package, and a unit and an integration folder."""
    tests = pytester.path / "tests"
    for folder in ("support", "unit", "integration"):
        (tests / folder).mkdir(parents=True)
        (tests / folder / "__init__.py").write_text("")
    (tests / "__init__.py").write_text("")
    shutil.copy(REPO / "tests" / "conftest.py", tests / "conftest.py")
    shutil.copy(REPO / "tests" / "longest_first.txt", tests / "longest_first.txt")
    shutil.copy(REPO / "tests" / "support" / "__init__.py", tests / "support" / "__init__.py")
    (pytester.path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    return pytester


def write(tree: pytest.Pytester, path: str, body: str) -> None:
    (tree.path / path).write_text("import pytest\n\n" + body)


def run(tree: pytest.Pytester, *args: str) -> pytest.RunResult:
    return tree.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_well_marked_tests_run_in_their_lane(tree):
    write(tree, "tests/unit/test_a.py", "pytestmark = pytest.mark.unit\n\ndef test_a():\n    pass\n")
    write(tree, "tests/integration/test_b.py", "pytestmark = pytest.mark.integration\n\ndef test_b():\n    pass\n")
    run(tree, "-m", "unit").assert_outcomes(passed=1, deselected=1)


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        ("tests/unit/test_bad.py", "def test_bad():\n    pass\n", "has no marker"),
        (
            "tests/unit/test_bad.py",
            "pytestmark = pytest.mark.integration\n\n@pytest.mark.unit\ndef test_bad():\n    pass\n",
            "is marked both unit and integration",
        ),
        (
            "tests/unit/test_bad.py",
            "pytestmark = pytest.mark.integration\n\ndef test_bad():\n    pass\n",
            "is marked integration but lives in tests/unit/",
        ),
        (
            "tests/integration/test_bad.py",
            "@pytest.mark.unit\ndef test_bad():\n    pass\n",
            "is marked unit but lives in tests/integration/",
        ),
        (
            "tests/test_bad.py",
            "pytestmark = pytest.mark.unit\n\ndef test_bad():\n    pass\n",
            "lives outside tests/unit/ and tests/integration/",
        ),
        (
            "tests/unit/test_bad.py",
            "pytestmark = [pytest.mark.unit, pytest.mark.outside_ci]\n\ndef test_bad():\n    pass\n",
            "is a unit test marked outside_ci",
        ),
    ],
    ids=["unmarked", "both", "integration-in-unit", "unit-in-integration", "outside", "outside-ci-unit"],
)
def test_a_test_that_escapes_the_rule_fails_collection_naming_it(tree, path, body, reason):
    write(tree, "tests/unit/test_a.py", "pytestmark = pytest.mark.unit\n\ndef test_a():\n    pass\n")
    write(tree, path, body)
    result = run(tree, "-m", "unit")  # `make check`'s lane: the file fails to collect, whatever `-m` selects
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*{path}::test_bad {reason}*", "*Interrupted: 1 error during collection*"])
    result.stdout.no_fnmatch_line("*passed*")


def test_under_xdist_a_test_that_escapes_the_rule_fails_the_run_naming_it(tree):
    """`make test`'s way (two workers, a file each): the workers collect, and the run still fails."""
    write(tree, "tests/integration/test_bad.py", "def test_bad():\n    pass\n")
    result = run(tree, "-n", "2", "--dist", "loadfile")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*tests/integration/test_bad.py::test_bad has no marker*"])


def test_the_files_longest_first_names_start_first_in_its_order(tree):
    """`make test`'s options on one worker, so the order the worker ran the files in shows: those the list names in
    its order, the rest after (pytest-xdist alone would start the file with the most tests first)."""
    write(
        tree,
        "tests/unit/test_a.py",
        "pytestmark = pytest.mark.unit\n\n" + "".join(f"def test_a{n}():\n    pass\n\n" for n in range(3)),
    )
    write(tree, "tests/unit/test_b.py", "pytestmark = pytest.mark.unit\n\ndef test_b():\n    pass\n")
    write(tree, "tests/unit/test_c.py", "pytestmark = pytest.mark.unit\n\ndef test_c():\n    pass\n")
    (tree.path / "tests" / "longest_first.txt").write_text(
        "# longest first\ntests/unit/test_c.py\n\ntests/unit/test_b.py\n"
    )
    result = run(tree, "-n", "1", "--dist", "loadfile", "--no-loadscope-reorder", "-v")
    result.assert_outcomes(passed=5)
    ran = [line.split("PASSED ")[1].split("::")[0] for line in result.outlines if "PASSED tests/" in line]
    assert ran == ["tests/unit/test_c.py", "tests/unit/test_b.py", *["tests/unit/test_a.py"] * 3], result.outlines


def test_every_file_longest_first_names_exists():
    """A renamed or deleted file left in the list would silently start last again."""
    from tests.conftest import longest_first

    named = longest_first()
    assert named and all((REPO / path).is_file() and path.startswith("tests/integration/") for path in named), named
    assert len(set(named)) == len(named), named
