"""Time an increment in a warm driver: one process runs a warm-up lake's new files, then the measured lake's.

    python -m bench.jobs.warm_increment <warm-up lake> <lake>     (new files already landed in both)

The first run pays the JVM start, the JIT and the imports; the second is what a long-lived driver (one that
stays up between scheduled runs) would pay. Prints {"warm_up_seconds": s, "seconds": s} as its last line.
"""

from __future__ import annotations

import json
import os
import sys
import time

from spark_jobs import runner


def main(warm_up_lake: str, lake: str) -> int:
    timings = {}
    for name, path, run_id in (("warm_up_seconds", warm_up_lake, "bench-warm-up"), ("seconds", lake, "bench-warm")):
        os.environ["MILLPOND_LAKE"] = path  # read by every run: the session stays, the lake changes
        started = time.perf_counter()
        code = runner.main(["activity", "--run-id", run_id])
        if code != 0:
            print(f"bench: warm run on {path} failed with exit code {code}", file=sys.stderr)
            return code
        timings[name] = round(time.perf_counter() - started, 2)
    print(json.dumps(timings))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
