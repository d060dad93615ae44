"""A child process for tests/integration/object_store/test_lease.py: one run that takes a pipeline's lease on an
object-store lake, as a run on another machine would (its own working folder, temp folder and home).

Prints one JSON line per event on stdout: {"acquired": generation}, {"checked": generation} before each
pretend commit, then {"released": generation}; {"busy": message} with exit code 3 if the lease is held, or
{"lost": message} with exit code 4 if a check fails. The AWS_* variables come from the environment.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from millpond.lake.lease import LeaseLost, pipeline_lease
from millpond.lake.lock_errors import PipelineBusy


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lake", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to hold the lease, checking every second")
    parser.add_argument("--wait", type=float, default=0.0)
    parser.add_argument("--ttl", type=float, default=None)
    args = parser.parse_args(argv)
    try:
        with pipeline_lease(args.lake, args.pipeline, args.run_id, args.wait, args.ttl) as lease:
            say(acquired=lease.generation)
            end = time.monotonic() + args.hold
            while time.monotonic() < end:
                time.sleep(1.0)
                say(checked=lease.check())
            generation = lease.generation
        say(released=generation)
    except PipelineBusy as busy:
        say(busy=str(busy))
        return 3
    except LeaseLost as lost:
        say(lost=str(lost))
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
