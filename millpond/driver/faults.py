"""The fault points the kill tests use: the run SIGKILLs itself exactly there, as a crash would stop it.

MILLPOND_FAULT=`<table id>:<point>[:<batch id>]` names one point of one table (of one batch, or of every batch).
With MILLPOND_FAULT_PAUSE_FILE set, the run pauses there instead (the file exists while it waits), so a test can
act mid-batch, e.g. take the run's lease over.
On the engine the batch points are reached in the server's batch worker: the run's own process is killed there.
The points sit between the commits whose order the exactly-once guarantees depend on (docs/reliability.md):

    before_write    offsets logged for the batch, nothing written to Delta yet
    between_writes  the table's rows committed, its quarantine rows not yet (a CDC table: its change store
                    committed, the table not yet)
    after_write     Delta committed, Spark's commit log not yet: the replay must be skipped
    after_query     every batch committed, millpond's own records of the table not yet
    after_table     the table finished, the run's event-log row not yet written
    before_replace  a reprocess: every slice computed and validated, this table's replacement not committed yet
    between_replaces  a reprocess: the table's slice committed, its quarantine's part not yet
    after_replace   a reprocess: the table's slice and quarantine committed, the next table's not yet
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from millpond import settings
from millpond.driver.run_guard import server_guard


def inject_fault(table_id: str, point: str, batch_id: int | None = None) -> None:
    wanted = settings.FAULT.value().split(":")
    if len(wanted) >= 2 and wanted[0] == table_id and wanted[1] == point:
        if len(wanted) == 2 or batch_id is None or int(wanted[2]) == batch_id:
            pause_file = settings.FAULT_PAUSE_FILE.value()
            if pause_file:
                _pause(Path(pause_file))
            else:
                _crash()


def _pause(marker: Path, limit_seconds: float = 300) -> None:
    """Create `marker` and wait until it is gone (the test deleted it) or the limit passed."""
    marker.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + limit_seconds
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def _crash() -> None:
    """SIGKILL the run. In an engine's batch worker (millpond.driver.connect_batch, millpond.driver.run_guard) the run is the client process
    holding the pipeline lock: it is killed, and the batch goes on until its next commit finds the run gone."""
    guard = server_guard()
    if guard is None:
        os.kill(os.getpid(), signal.SIGKILL)
        return
    os.kill(guard.client_pid, signal.SIGKILL)
    guard.wait_gone()
