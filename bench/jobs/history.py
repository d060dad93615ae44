"""Build a benchmark lake's history: land each round's files, then `millpond run` them, in one warm JVM.

python -m bench.jobs.history <lake> <rounds.json>     (MILLPOND_LAKE must name the same lake)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.data import land
from millpond.driver import runner


def main(lake: str, manifest: str) -> int:
    for number, files in enumerate(json.loads(Path(manifest).read_text())):
        land(Path(lake), [Path(f) for f in files])
        code = runner.main(["activity", "--run-id", f"history-{number:04d}", "--trigger", "backfill"])
        if code != 0:
            print(f"bench: history run {number} failed with exit code {code}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
