"""Where a run executes is chosen once (millpond.driver.targets): the engine when SPARK_REMOTE names one, else a JVM
of the process's own; a check's `--master` beside an engine is refused before anything starts."""

from __future__ import annotations

import pytest

from millpond.driver import targets
from millpond.driver.connect_server import EngineError

pytestmark = pytest.mark.unit

REMOTE = "sc://localhost:15002/;token=abc"


@pytest.fixture
def engine_named(monkeypatch):
    monkeypatch.setenv("SPARK_REMOTE", REMOTE)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)


def test_a_run_goes_to_the_engine_spark_remote_names(engine_named):
    target = targets.for_run("local[1]")
    assert isinstance(target, targets.OnEngine) and target.remote == REMOTE
    assert str(target) == "the engine at sc://localhost:15002/"  # the token is never printed
    assert not target.launching


def test_without_an_engine_a_run_has_a_jvm_of_its_own_on_its_master(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    target = targets.for_run("local[1]")
    assert isinstance(target, targets.OwnJvm) and target.master == "local[1]"


def test_under_spark_submit_a_run_joins_its_jvm_even_with_an_engine_named(engine_named, monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "12345")  # spark-submit started the JVM for this process
    assert isinstance(targets.for_run(), targets.OwnJvm)


def test_a_check_asking_for_a_master_beside_an_engine_is_refused(engine_named):
    with pytest.raises(EngineError, match=r"--master local\[1\] asks for a JVM of this command's own.*unset"):
        targets.for_command("local[1]")
    assert isinstance(targets.for_command(), targets.OnEngine)


def test_an_engine_batch_function_needs_the_runs_holding_of_the_lock_first(engine_named):
    """The server-side batch carries the run's guard, taken with its session under the lock: asked before, it says so
    instead of writing unguarded."""
    with pytest.raises(RuntimeError, match="run_session first"):
        targets.for_run().batch_function(lambda batch, batch_id: None, "silver.activity")  # type: ignore[arg-type]
