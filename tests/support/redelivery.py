"""A producer's correction of a landed file: one record's event time changed, under the same name, atomically."""

from __future__ import annotations

import json
from pathlib import Path

from millpond.dev.sample_data import land_file
from tests.support.reference import well_formed


def move_event_time(file: Path, nth: int, to: str) -> str:
    """Give the file's `nth` well-formed record with an event time the time `to`; return the file's text before
    (write it back to undo the correction)."""
    before = file.read_text(encoding="utf-8")
    lines = before.splitlines()
    timed = [i for i, line in enumerate(lines) if (well_formed(line) or {}).get("Recorded_At")]
    record = json.loads(lines[timed[nth]])
    assert record["Recorded_At"][:13] != to[:13], f"{file.name}: record {nth} already lies in {to[:13]}"
    record["Recorded_At"] = to
    lines[timed[nth]] = json.dumps(record)
    land_file(file.parent, file.name, lines)
    return before
