"""How a stopped task takes its whole spark-submit process tree with it (the JVM and the Python driver).

The Python driver holds the pipeline lock: a driver left running after its task was killed would keep the next run
waiting. Used by the hook only, so psutil loads when a task runs, never at DAG parsing.
"""

from __future__ import annotations

import signal

import psutil  # an Airflow dependency

# Imported inside functions: ctypes (Linux's prctl) only where a child is started.


def kill_tree(pid: int, grace: float = 10.0) -> None:
    """SIGTERM a process and its descendants (the JVM runs its shutdown hooks), SIGKILL what is left after `grace`."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def die_with_parent() -> None:
    """Runs in the spark-submit child before exec: the kernel SIGKILLs it if the task process dies (kill -9).

    on_kill covers a task Airflow stops; this covers a task process that is killed outright and runs no handler.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: on_kill and the supervisor's process-group kill still apply
        pass
