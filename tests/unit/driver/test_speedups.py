"""The switches that turn each speed-up off: read before any JVM starts, a typo refused naming the fix."""

from __future__ import annotations

import os
import subprocess

import pytest

from millpond.driver import speedups
from millpond.spec import SpecError
from tests.support.stress import MILLPOND

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value, expected", [(None, True), ("on", True), ("OFF", False), ("false", False), ("", True)])
def test_each_speed_up_is_on_unless_its_variable_says_off(monkeypatch, value, expected):
    for speed_up in speedups.ALL:
        if value is None:
            monkeypatch.delenv(speed_up.env, raising=False)
        else:
            monkeypatch.setenv(speed_up.env, value)
        assert speed_up.enabled() is expected


def test_a_typo_is_refused_naming_the_variable_and_both_values(monkeypatch):
    monkeypatch.setenv("MILLPOND_DELTA_RS_COMMITS", "of")
    with pytest.raises(SpecError, match=r"MILLPOND_DELTA_RS_COMMITS='of' is neither on nor off\. Fix: set it to on"):
        speedups.check_settings()


def test_a_run_with_a_bad_switch_stops_before_the_lock_and_the_jvm(lake):
    proc = subprocess.run(
        [MILLPOND, "run", "activity"],
        env={**os.environ, "MILLPOND_JSON_FUNCTIONS": "fast"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "MILLPOND_JSON_FUNCTIONS='fast' is neither on nor off" in proc.stderr
    assert not (lake / "_system" / "locks").exists()  # refused before the pipeline lock was taken


def test_the_jit_choice_off_starts_every_jvm_with_hotspot_s_defaults(monkeypatch):
    from millpond.driver import driver_jit
    from millpond.driver.spark_conf import base_conf

    monkeypatch.setenv(driver_jit.ENV, "off")
    chosen = driver_jit.choose(None, [], full_refresh=False)  # forced: decided before the pipeline is looked at
    assert (chosen.mode, chosen.java_options) == ("off", "")
    assert "spark.executor.extraJavaOptions" not in base_conf()
    monkeypatch.delenv(driver_jit.ENV)
    assert base_conf()["spark.executor.extraJavaOptions"] == driver_jit.HUGE_METHODS_OPTIONS


def _code_cache_bytes(options: str) -> int:
    """ReservedCodeCacheSize as HotSpot settles it for these JVM options (a JVM that only prints its flags)."""
    flags = subprocess.run(
        ["java", *options.split(), "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True
    ).stdout
    return next(int(line.split("=")[1].split()[0]) for line in flags.splitlines() if " ReservedCodeCacheSize " in line)


def test_a_quick_driver_has_the_default_jit_s_code_cache():
    """C1 alone would size the code cache at 48 MB, which a long quick-mode run once filled and then failed."""
    from millpond.driver import driver_jit

    default = _code_cache_bytes("")
    assert _code_cache_bytes(driver_jit.QUICK_OPTIONS) < default  # what the option is there to mend
    assert _code_cache_bytes(driver_jit.java_options("quick")) >= default
