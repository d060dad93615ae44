"""What each test file cost in a run, from the junit XML every `make test` writes (.cache/test-results/).

    python -m tests.support.durations .cache/test-results/junit.xml [--top 20] [--write tests/longest_first.txt]

It prints the files that took longest with their seconds (docs/testing.md shows this table from a fresh-clone
`.ci/run`), and with `--write` regenerates tests/longest_first.txt, the order tests/conftest.py starts the
integration files in, so that a long file never starts last (`make test-durations` does both). A test's time is its
setup, call and teardown (pytest's junit default), so a module fixture is charged to the file that uses it.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

HEADER = (
    "# The integration test files, longest first (tests/conftest.py starts them in this order; docs/testing.md).\n"
    "# Written by `make durations` from the junit XML of {source} ({when}); a file not listed starts last.\n"
)


def per_file(junit_files: list[Path]) -> tuple[Counter[str], Counter[str]]:
    """(seconds per test file, tests per test file) over the given junit XML files."""
    seconds: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for junit in junit_files:
        for case in ET.parse(junit).iter("testcase"):
            module = case.get("classname", "")
            # pytest names a module's tests `tests.integration.x.test_y` (a class adds one more dotted part).
            parts = module.split(".")
            while parts and not parts[-1].startswith("test_"):
                parts.pop()
            if not parts:
                continue
            path = "/".join(parts) + ".py"
            seconds[path] += float(case.get("time") or 0)
            tests[path] += 1
    return seconds, tests


def table(seconds: Counter[str], tests: Counter[str], top: int) -> str:
    """The `top` longest files as a markdown table, and the whole run's test time."""
    rows = ["| # | file | tests | seconds |", "|---|---|---|---|"]
    for rank, (path, spent) in enumerate(seconds.most_common(top), start=1):
        rows.append(f"| {rank} | {path} | {tests[path]} | {spent:.0f} |")
    rows.append(f"\n{sum(tests.values())} tests, {sum(seconds.values()):.0f} s of test time over all workers")
    return "\n".join(rows)


def longest_first(seconds: Counter[str], source: str) -> str:
    """tests/longest_first.txt's text: every integration file of the run that still exists, longest first."""
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    files = [
        path for path, _ in seconds.most_common() if path.startswith("tests/integration/") and Path(path).is_file()
    ]
    return HEADER.format(source=source, when=when) + "".join(f"{path}\n" for path in files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", nargs="+", type=Path, help="junit XML files of one run")
    parser.add_argument("--top", type=int, default=20, help="how many of the longest files to print")
    parser.add_argument("--write", type=Path, default=None, help="regenerate this longest-first list")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.junit if not p.is_file()]
    if missing:
        print(f"durations: no junit XML at {', '.join(missing)}. Fix: run `make test` first", file=sys.stderr)
        return 2
    seconds, tests = per_file(args.junit)
    print(table(seconds, tests, args.top))
    if args.write:
        args.write.write_text(longest_first(seconds, ", ".join(p.name for p in args.junit)))
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
