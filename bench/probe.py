"""Run one measured process: wall time, peak RSS of its whole tree (Python driver + JVM), its output."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.data import REPO

SAMPLE_SECONDS = 0.05


@dataclass
class Measured:
    wall: float
    peak_rss_mb: float
    output: str
    phases: dict[str, float] = field(default_factory=dict)  # from millpond's `millpond: phases` line(s)

    def last_json(self) -> dict:
        """The job's own figures: the last output line that is a JSON object."""
        for line in reversed(self.output.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise ValueError(f"no JSON line in the output:\n{self.output[-2000:]}")


def measure(command: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> Measured:
    """Start `command` in its own session and sample the RSS of every process in it until it exits.

    Its Python (PYSPARK_PYTHON) is this interpreter unless set, as `make bench` sets it: pyspark's `spark-submit`
    script looks for pyspark with it, and a bare `python -m bench.run` would otherwise leave it to `python3` on PATH.
    """
    started = time.perf_counter()
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env={"PYSPARK_PYTHON": sys.executable, **os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.extend(proc.stdout), daemon=True)  # never block on a full pipe
    reader.start()
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(_rss(p) for p in tree))
        except psutil.NoSuchProcess:
            pass
        if time.perf_counter() - started > timeout:
            os.killpg(proc.pid, 9)
        time.sleep(SAMPLE_SECONDS)
    wall = time.perf_counter() - started
    reader.join()
    output = "".join(chunks)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{output[-4000:]}")
    return Measured(wall, peak / 2**20, output, phases(output))


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


_PHASE = re.compile(r"(\S+)=([\d.]+)s")


def phases(output: str) -> dict[str, float]:
    """Sum the `millpond: phases a=1.0s b=2.0s` lines of one or more Spark applications."""
    total: dict[str, float] = {}
    for line in output.splitlines():
        if "millpond: phases " in line:
            for name, seconds in _PHASE.findall(line.split("millpond: phases ", 1)[1]):
                total[name] = total.get(name, 0.0) + float(seconds)
    return total


def spread(values: list[float], digits: int = 2) -> dict[str, float]:
    """Median with min and max: the figure a single noisy run cannot fake."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
    }


def millpond_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "millpond"), "run", "activity", *args]
