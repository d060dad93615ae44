"""`millpond class-archive`: build the class-data archive of millpond.driver.class_archive by running a small
pipeline of millpond's own in a JVM that writes the classes it loaded at exit, then check a JVM starts on it.

Here, above the engine, because the training run needs a project (`millpond init`'s template) and sample data.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from millpond import process_env, settings
from millpond.driver.class_archive import LOG_OFF, archive_path

# Imported inside functions: the training pipeline's modules (and pyspark) only in the child process that trains the
# archive.


def build(force: bool = False) -> tuple[Path | None, str]:
    """Build the archive for this JVM and Spark (unless it exists): (its path or None, what happened)."""
    target = archive_path()
    if target is None:
        return None, "no java found: nothing to archive"
    if target.is_file() and not force:
        return target, f"up to date: {target}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="millpond-class-archive-") as work:
        dumped = Path(work) / "driver.jsa"
        started = time.monotonic()
        trained = _in_child(["train", work, str(dumped)])
        if trained.returncode != 0 or not _wait_for_dump(trained.stdout, dumped):
            return None, f"the training run failed, no archive written:\n{(trained.stdout + trained.stderr)[-3000:]}"
        checked = _in_child(["check", str(dumped)])  # a JVM that cannot map it fails to start with -Xshare:on
        if checked.returncode != 0 or "CHECKED" not in checked.stdout:
            return (
                None,
                f"a JVM could not start on the new archive, none kept:\n{(checked.stdout + checked.stderr)[-3000:]}",
            )
        staged = target.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(dumped, staged)
        staged.replace(target)  # atomic: a run sees the whole archive or none
    for stale in target.parent.glob("driver-*.jsa"):
        if stale != target:
            stale.unlink(missing_ok=True)
    return target, f"built {target} ({target.stat().st_size / 2**20:.0f} MB) in {time.monotonic() - started:.0f} s"


def _in_child(args: list[str]) -> subprocess.CompletedProcess:
    # The training JVM writes a new archive and the check maps that one: neither starts on an existing archive.
    env = process_env.child(
        {
            "SPARK_REMOTE": None,
            "SPARK_CONNECT_MODE_ENABLED": None,
            "MILLPOND_FAULT": None,
            "MILLPOND_CLASS_ARCHIVE": "off",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "millpond.project.class_archive_build", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _wait_for_dump(output: str, dumped: Path, timeout: float = 120) -> bool:
    """HotSpot writes the archive as the JVM exits, which is after the Python driver that started it has exited:
    wait for that JVM (its pid, printed by the training run) to be gone."""
    import psutil

    pid = next((int(line.split()[1]) for line in output.splitlines() if line.startswith("JVM ")), None)
    deadline = time.monotonic() + timeout
    while pid is not None and psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    return dumped.is_file() and dumped.stat().st_size > 0


def _train(work: Path, dumped: Path) -> int:
    """A small pipeline of millpond's own (the `millpond init` template: landing files into bronze, a deduplicated,
    gated silver, a complete-mode gold) run twice in a JVM that writes its loaded classes to `dumped` at exit."""
    from millpond.dev.sample_data import activity_files
    from millpond.driver import runner
    from millpond.driver.driver_jit import java_options
    from millpond.driver.session import build_spark_session
    from millpond.project.scaffold import create_project

    project, name = work / "project", "training"
    create_project(project, name)
    process_env.for_process(  # this process exists to train the archive
        {
            "MILLPOND_LAKE": str(work / "lake"),
            "MILLPOND_PIPELINES": str(project / "pipelines"),
            "MILLPOND_EXPECTATIONS": str(project / "expectations"),
            "MILLPOND_JARS": str(settings.jars_dir()),
            "MILLPOND_REPORT_ASSETS": str(settings.report_assets_dir()),
        }
    )
    spark = build_spark_session(
        "millpond:class-archive", 2, driver_java_options=f"-XX:ArchiveClassesAtExit={dumped} {java_options('quick')}"
    )
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    print(f"JVM {jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
    landing = work / "lake" / "landing" / name
    for round_number in range(2):
        activity_files(landing, 1, 200, duplicates=0.05, malformed=0.02, seed=round_number)
        if runner.main([name, "--run-id", f"training-{round_number}"]) != 0:
            return 1
    spark.stop()
    return 0


def _check(dumped: Path) -> int:
    from millpond.driver.session import build_spark_session

    spark = build_spark_session(
        "millpond:class-archive-check", 2, driver_java_options=f"-Xshare:on -XX:SharedArchiveFile={dumped} {LOG_OFF}"
    )
    print("CHECKED" if spark.range(3).count() == 3 else "WRONG", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    verb, *rest = sys.argv[1:]
    sys.exit(_train(Path(rest[0]), Path(rest[1])) if verb == "train" else _check(Path(rest[0])))
