"""MILLPOND_WARM_DRIVER=on: `millpond run` hands its runs to one driver that stays up, and nothing is lost when
that driver is killed mid-run or its client goes away; the tables always equal the plain-Python reference."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time

import psutil
import pytest

from millpond.dev.sample_data import activity_files
from millpond.engine import warm_driver
from tests.support.lake_tables import assert_matches_reference
from tests.support.reference import activity_reference
from tests.support.stress import MILLPOND

pytestmark = pytest.mark.integration

HANDED = re.compile(r"millpond: run handed to the warm driver \(pid (\d+), (\d+) run\(s\) served before\)")


@pytest.fixture
def warm(lake):
    """The lake's env with the warm driver on; whatever driver the test started is stopped (or killed) after it."""
    env = {**os.environ, "MILLPOND_LAKE": str(lake), warm_driver.ENV: "on"}
    env.pop("MILLPOND_FAULT", None)
    yield env
    info = warm_driver.status(lake)
    if info is not None:
        warm_driver.stop(lake)
        assert wait_gone(info["pid"], 60), "the warm driver did not exit on `millpond driver stop`"


def millpond(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([MILLPOND, *args], env=env, capture_output=True, text=True, timeout=timeout)


def handed(result: subprocess.CompletedProcess) -> tuple[int, int]:
    found = HANDED.search(result.stderr)
    assert found, f"the run was not handed to a warm driver:\n{result.stderr[-3000:]}"
    return int(found[1]), int(found[2])


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.2)
    return False


def session_of(pid: int, seconds: float = 30) -> list[psutil.Process]:
    """What is left, after up to `seconds`, of the driver and its JVM (a session of their own: start_new_session)."""
    deadline = time.monotonic() + seconds
    while True:
        alive = []
        for process in psutil.process_iter(["pid"]):
            try:
                if os.getsid(process.pid) == pid and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


def test_runs_are_handed_to_one_warm_driver_and_equal_the_reference(spark, lake, warm):
    landing = lake / "landing" / "activity"
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=1)
    assert millpond(warm, "generate", "clicks", "--files", "1", "--rows", "200", "--seed", "1").returncode == 0
    # Two pipelines' first runs at once (two DAGs' tasks): one driver is started between them, and it serves them
    # one after the other.
    clients = [
        subprocess.Popen([MILLPOND, "run", name], env=warm, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("activity", "clicks")
    ]
    first, clicks = [subprocess.CompletedProcess(c.args, c.wait(600), *c.communicate()) for c in clients]
    assert first.returncode == clicks.returncode == 0, first.stderr[-3000:] + clicks.stderr[-3000:]
    (pid, a), (clicks_pid, b) = handed(first), handed(clicks)
    assert pid == clicks_pid and sorted([a, b]) == [0, 1]
    assert "bronze.activity              succeeded" in first.stdout  # the runner's output streams back
    assert f"quarantined={activity_reference(landing).quarantined} " in first.stdout, first.stdout[-3000:]
    assert re.search(r"silver\.impression_clicks +succeeded", clicks.stdout), clicks.stdout[-3000:]

    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=2)
    second = millpond(warm, "run", "activity")
    assert second.returncode == 0, second.stderr[-3000:]
    assert handed(second) == (pid, 2)  # the same process: no new JVM
    assert_matches_reference(spark, activity_reference(landing))

    # Nothing new: answered by the client without waking the driver.
    idle = millpond(warm, "run", "activity")
    assert idle.returncode == 0 and "no Spark application started" in idle.stdout, idle.stderr[-3000:]
    assert not HANDED.search(idle.stderr)
    status = millpond(warm, "driver", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert {k: json.loads(status.stdout)[k] for k in ("pid", "runs", "jit")} == {"pid": pid, "runs": 3, "jit": "full"}

    # Another process rebuilds every table under the idle driver; the driver's next run reads the new logs.
    rebuilt = millpond({**warm, warm_driver.ENV: "off"}, "run", "activity", "--full-refresh", "bronze.activity")
    assert rebuilt.returncode == 0 and not HANDED.search(rebuilt.stderr), rebuilt.stderr[-3000:]
    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=3)
    after = millpond(warm, "run", "activity")
    assert after.returncode == 0, after.stderr[-3000:]
    assert handed(after) == (pid, 3)
    assert_matches_reference(spark, activity_reference(landing))

    # A run asking for other JVM settings retires the driver; a new one takes the run.
    activity_files(landing, 1, 300, seed=4)
    retired = millpond({**warm, "MILLPOND_DRIVER_MEMORY": "1g"}, "run", "activity")
    assert retired.returncode == 0, retired.stderr[-3000:]
    assert (
        "millpond: the warm driver retired (the run asks for other JVM settings (MILLPOND_DRIVER_MEMORY)); "
        "starting a new one"
    ) in retired.stderr
    new_pid, served = handed(retired)
    assert new_pid != pid and served == 0 and wait_gone(pid, 30)
    assert_matches_reference(spark, activity_reference(landing))

    bad = millpond({**warm, warm_driver.ENV: "yes"}, "run", "activity")
    assert bad.returncode == 2
    assert "MILLPOND_WARM_DRIVER='yes' is not a mode. Fix: set it to on" in bad.stderr

    stop = millpond(warm, "driver", "stop")
    assert stop.returncode == 0 and "stopping" in stop.stdout
    assert wait_gone(new_pid, 60) and session_of(new_pid) == []
    assert millpond(warm, "driver", "status").returncode == 1

    # An idle driver frees its memory by itself.
    started = millpond({**warm, "MILLPOND_WARM_DRIVER_IDLE_SECONDS": "1"}, "driver", "start")
    assert started.returncode == 0, started.stderr[-3000:]
    idle_pid = json.loads(millpond(warm, "driver", "status", "--json").stdout)["pid"]
    assert wait_gone(idle_pid, 60) and session_of(idle_pid) == []
    assert "idle for 1 s: exiting" in warm_driver.log_path(lake).read_text()


def test_a_warm_driver_killed_mid_run_or_left_by_its_client_loses_nothing(spark, lake, warm):
    landing = lake / "landing" / "activity"
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=11)
    # The driver SIGKILLs itself between bronze's table and quarantine writes: the client says so and exits 1.
    killed = millpond({**warm, "MILLPOND_FAULT": "bronze.activity:between_writes"}, "run", "activity")
    assert killed.returncode == 1, killed.stderr[-3000:]
    pid, _ = handed(killed)
    assert "stopped mid-run; the next run replays the unfinished batch from its checkpoint" in killed.stderr
    assert wait_gone(pid, 30) and session_of(pid) == []  # its JVM died with it

    activity_files(landing, 1, 300, duplicates=0.05, malformed=0.02, seed=12)
    killed = millpond({**warm, "MILLPOND_FAULT": "silver.activity:after_write"}, "run", "activity")
    assert killed.returncode == 1, killed.stderr[-3000:]
    pid, _ = handed(killed)
    assert wait_gone(pid, 30)

    # The client (an Airflow task, say) is killed while the driver runs its run: the driver exits too.
    activity_files(landing, 2, 300, duplicates=0.05, malformed=0.02, seed=13)
    client = subprocess.Popen(
        [MILLPOND, "run", "activity"],
        env=warm,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    info = None
    while time.monotonic() < deadline:
        info = warm_driver.status(lake)
        if info is not None and info["busy"]:
            break
        time.sleep(0.2)
    assert info is not None and info["busy"], "the run never reached the warm driver"
    time.sleep(3)  # into the run
    os.killpg(client.pid, signal.SIGKILL)
    client.communicate(timeout=60)
    assert wait_gone(info["pid"], 30), "the warm driver kept running after its client was killed"
    assert session_of(info["pid"]) == []
    log = warm_driver.log_path(lake).read_text()
    assert "the client left mid-run" in log

    final = millpond({**warm, "MILLPOND_WARM_DRIVER_MAX_RUNS": "1"}, "run", "activity")
    assert final.returncode == 0, final.stderr[-3000:]
    final_pid, served = handed(final)
    assert served == 0  # a new driver
    assert_matches_reference(spark, activity_reference(landing))
    assert wait_gone(final_pid, 60), "a driver that served MILLPOND_WARM_DRIVER_MAX_RUNS runs keeps running"
    assert "served 1 runs: exiting" in warm_driver.log_path(lake).read_text()


def test_a_driver_that_does_not_answer_fails_the_run_by_name_and_no_second_one_is_started(lake, warm):
    """Something holds the lake's driver socket and never answers (a hung driver): the run exits 1 saying so."""
    activity_files(lake / "landing" / "activity", 1, 50, seed=3)  # something new: the run is handed over
    path = warm_driver.socket_path(lake)
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hung.bind(str(path))
    hung.listen(8)  # connections are queued, never read
    try:
        run = millpond(warm, "run", "activity", timeout=120)
        status = millpond(warm, "driver", "status", timeout=60)
        stop = millpond(warm, "driver", "stop", timeout=60)
    finally:
        hung.close()
        path.unlink(missing_ok=True)
    answer = f"did not answer within {warm_driver.ANSWER_TIMEOUT_SECONDS:.0f} s"
    assert run.returncode == 1, run.stderr
    assert f"the warm driver of {lake} {answer}; no second driver was started" in run.stderr
    assert "Traceback" not in run.stderr + status.stderr + stop.stderr
    assert not warm_driver.log_path(lake).exists()  # no driver process was started (it would log there)
    assert (status.returncode, stop.returncode) == (1, 1) and answer in status.stderr and answer in stop.stderr
