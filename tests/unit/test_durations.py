"""tests/support/durations.py: the per-file seconds of a run and the longest-first list it regenerates."""

from __future__ import annotations

import pytest

from tests.support import durations

pytestmark = pytest.mark.unit

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.faults.test_kill" name="test_a" time="120.5"/>
<testcase classname="tests.integration.faults.test_kill" name="test_b" time="30.0"/>
<testcase classname="tests.integration.engine.test_engine.TestOnTheEngine" name="test_c" time="200.0"/>
<testcase classname="tests.integration.lake.test_event_log" name="test_d[x]" time="3.25"/>
<testcase classname="tests.unit.test_settings" name="test_e" time="0.5"/>
</testsuite></testsuites>
"""


@pytest.fixture
def junit(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    return path


def test_seconds_and_tests_add_up_per_file_a_class_counted_with_its_module(junit):
    seconds, tests = durations.per_file([junit])
    assert seconds == {
        "tests/integration/faults/test_kill.py": 150.5,
        "tests/integration/engine/test_engine.py": 200.0,
        "tests/integration/lake/test_event_log.py": 3.25,
        "tests/unit/test_settings.py": 0.5,
    }
    assert tests["tests/integration/faults/test_kill.py"] == 2


def test_the_written_list_holds_the_integration_files_longest_first(junit, tmp_path, capsys):
    target = tmp_path / "longest_first.txt"
    assert durations.main([str(junit), "--top", "2", "--write", str(target)]) == 0
    listed = [line for line in target.read_text().splitlines() if line and not line.startswith("#")]
    assert listed == [
        "tests/integration/engine/test_engine.py",
        "tests/integration/faults/test_kill.py",
        "tests/integration/lake/test_event_log.py",
    ]
    printed = capsys.readouterr().out
    assert "| 1 | tests/integration/engine/test_engine.py | 1 | 200 |" in printed
    assert "| 2 | tests/integration/faults/test_kill.py | 2 | 150 |" in printed and "test_event_log" not in printed
    assert "5 tests, 354 s of test time" in printed


def test_a_missing_junit_file_names_the_fix(tmp_path, capsys):
    assert durations.main([str(tmp_path / "none.xml")]) == 2
    assert "Fix: run `make test` first" in capsys.readouterr().err
