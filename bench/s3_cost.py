"""What a lake on object storage costs: a no-op run and a 1 % increment of the activity pipeline on an `s3a://` lake
(a local s3proxy, tests' S3 server) against the same history on local disk, alternating sides, each run its own
`millpond run` process. The server logs every request, so each s3a run's LIST/HEAD/GET/PUT/DELETE are counted on the
server's side, between marker requests the bench sends before and after the run.

Both lakes' tables are checked against the plain-Python reference (read by delta-rs) before any figure is kept.
Writes bench/results-s3.json (not committed). Not a timed test. Usage:

    .venv/bin/python bench/s3_cost.py [--files 100] [--rows 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.probe import measure, spread  # noqa: E402

MILLPOND = str(Path(sys.executable).parent / "millpond")
BUCKET = "bench"
KINDS = ("LIST", "HEAD", "GET", "PUT", "DELETE")


def kind(method: str, path: str) -> str:
    """LIST, HEAD, GET (an object), PUT (copies included: s3proxy's log does not tell them apart), DELETE."""
    target, _, query = path.partition("?")
    if method == "GET" and ("list-type=" in query or "prefix=" in query or target.count("/") == 1):
        return "LIST"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


def counted(requests: list[tuple[str, str]], mark: str) -> dict[str, int]:
    """The requests between the `start-<mark>` and `end-<mark>` marker objects, by kind."""
    current: Counter | None = None
    for method, path in requests:
        if f"_marker/start-{mark}" in unquote(path):
            current = Counter()
        elif f"_marker/end-{mark}" in unquote(path):
            return {k: (current or Counter())[k] for k in KINDS}
        elif current is not None:
            current[kind(method, path)] += 1
    raise SystemExit(f"markers of {mark} not found in the server's log")


def land(local: Path, s3: object, first: int, files: int, rows: int) -> None:
    """Files into the local lake's landing folder, and the same bytes into the bucket's."""
    from millpond.dev.sample_data import activity_files

    landing = local / "landing" / "activity"
    before = set(landing.glob("*.json"))
    activity_files(landing, files, rows, duplicates=0.05, malformed=0.01, seed=first, start_index=first)
    for path in sorted(set(landing.glob("*.json")) - before):
        s3.put_object(Bucket=BUCKET, Key=f"lake/landing/activity/{path.name}", Body=path.read_bytes())  # type: ignore[attr-defined]


def check(lake: str, landing: Path, env: dict[str, str]) -> None:
    """The lake's tables against the reference over the landed files, read by delta-rs (a process of its own)."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]);"
        "from tests.support.lake_tables import assert_matches_reference_rs;"
        "from tests.support.reference import activity_reference;"
        "assert_matches_reference_rs(activity_reference(Path(sys.argv[1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(landing), str(REPO)],
        env={**os.environ, **env, "MILLPOND_LAKE": lake},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{lake}: the tables differ from the reference:\n{done.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    from millpond.dev.s3_server import S3Server
    from millpond.lake.object_store import S3Access, client

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100, help="files of history (an increment is one more file)")
    parser.add_argument("--rows", type=int, default=200, help="rows per file")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side and kind")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="millpond-s3-bench-"))
    server = S3Server(work / "s3", log_requests=True).start()
    try:
        server.create_bucket(BUCKET)
        s3_env = server.env()
        s3 = client(S3Access.from_mapping(s3_env))
        lakes = {"s3a": f"s3a://{BUCKET}/lake", "local": str(work / "lake")}
        env = {"s3a": s3_env, "local": {}}
        local = work / "lake"
        land(local, s3, 0, args.files, args.rows)
        for side, lake in lakes.items():
            first = measure([MILLPOND, "run", "activity"], env={**env[side], "MILLPOND_LAKE": lake})
            if "succeeded" not in first.output:
                raise SystemExit(first.output[-3000:])
        for side, lake in lakes.items():
            check(lake, local / "landing" / "activity", env[side])
        timed: dict[str, list[float]] = {f"{side}_{what}": [] for side in lakes for what in ("noop", "increment")}
        requests: dict[str, list[dict[str, int]]] = {"noop": [], "increment": []}
        marks = 0
        for k in range(args.repeats):
            for what in ("noop", "increment"):
                if what == "increment":
                    land(local, s3, args.files + k, 1, args.rows)  # one file: 1 % of a 100-file history
                for side in lakes if k % 2 == 0 else reversed(list(lakes)):
                    marks += 1
                    if side == "s3a":
                        s3.put_object(Bucket=BUCKET, Key=f"_marker/start-{marks}", Body=b"")
                    run = measure([MILLPOND, "run", "activity"], env={**env[side], "MILLPOND_LAKE": lakes[side]})
                    if "succeeded" not in run.output:
                        raise SystemExit(run.output[-3000:])
                    if what == "noop" and "no Spark application started" not in run.output:
                        raise SystemExit(f"{side}: a run with nothing new started Spark:\n{run.output[-3000:]}")
                    timed[f"{side}_{what}"].append(run.wall)
                    if side == "s3a":
                        s3.put_object(Bucket=BUCKET, Key=f"_marker/end-{marks}", Body=b"")
                        requests[what].append(counted(server.requests(), str(marks)))
        for side, lake in lakes.items():
            check(lake, local / "landing" / "activity", env[side])
        seconds = {name: spread(values) for name, values in timed.items()}
        result = {
            "what": f"activity pipeline, {args.files} files of {args.rows} rows landed, then per repeat a no-op run "
            "and a one-file increment; s3a on a local s3proxy (in-memory store), local on this machine's disk",
            "seconds": seconds,
            "s3a_over_local": {
                what: round(seconds[f"s3a_{what}"]["median"] / seconds[f"local_{what}"]["median"], 2)
                for what in ("noop", "increment")
            },
            "s3a_requests": requests,
            "machine": f"{os.cpu_count()} cores",
        }
        (REPO / "bench" / "results-s3.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
