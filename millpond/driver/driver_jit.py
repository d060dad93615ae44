"""Which JIT the driver JVM starts with, chosen per run from how much new input it has (decided without a JVM).

A scheduled run usually reads a few MB, and its time is a cold JVM warming up: on a 2-core machine HotSpot's C2
compiler threads compete with Spark's task threads for code that runs only once. Stopping at C1
(`-XX:TieredStopAtLevel=1`) took 17 % off bench B2's incremental run, but made a 1.1 GB full refresh 2.1x
slower (docs/benchmarks.md). So a run whose new input is small gets C1 only; a full refresh, a big backfill, or a
run whose input cannot be sized without a JVM (Kafka, a join, a table's first run over an existing table) keeps
the default tiered JIT. `MILLPOND_DRIVER_JIT` = `quick` or `full` forces either, and `off` starts every JVM with
HotSpot's own defaults (no option at all): the standard path the JIT choice is compared with (a JIT changes no result).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from millpond import settings
from millpond.lake import checkpoints, paths, storage
from millpond.lake.delta_log import bytes_added, latest_version
from millpond.spec import FileSource, Pipeline, SpecError, Table

ENV = settings.DRIVER_JIT.name
QUICK_OPTIONS = "-XX:TieredStopAtLevel=1"
# C1 alone makes HotSpot size its code cache as for a client VM, 48 MB instead of the tiered JIT's 240 MB. A long
# reprocessing run in quick mode, compiling huge methods too, filled it: compilation stopped and the next call that
# needed an adapter failed the run ("Out of space in CodeCache for adapters", CI on 2026-11-28). Quick mode keeps the
# default JIT's size; a reservation is address space, the cache commits memory only as code fills it.
QUICK_CODE_CACHE_OPTIONS = "-XX:ReservedCodeCacheSize=240m"
# Every millpond JVM, driver and executors, in either mode. HotSpot never compiles a method over 8,000 bytecode bytes
# (DontCompileHugeMethods), and whole-stage codegen fuses a stage's operators into one method: bronze's parse stage
# is about that size, so a small change to its plan moved it across the limit and made it run interpreted, 35-56 %
# slower (docs/benchmarks.md). Compiled, its size does not matter.
HUGE_METHODS_OPTIONS = "-XX:-DontCompileHugeMethods"
# Measured on the 2-core bench machine: C1 only saves ~10 s of warm-up per run and costs ~0.24 s per MB parsed
# (bronze + silver), so it breaks even near 40 MB of new input. Below this, it wins by several seconds.
QUICK_MAX_BYTES = 32 * 2**20


@dataclass(frozen=True)
class DriverJit:
    mode: str  # "quick" (C1 only), "full" (tiered, methods of any size) or "off" (HotSpot's defaults)
    reason: str

    @property
    def java_options(self) -> str:
        return java_options(self.mode)


def java_options(mode: str) -> str:
    """The driver JVM's options for a JIT mode ("quick", "full" or "off")."""
    quick = f"{QUICK_OPTIONS} {QUICK_CODE_CACHE_OPTIONS} {HUGE_METHODS_OPTIONS}"
    return {"quick": quick, "off": ""}.get(mode, HUGE_METHODS_OPTIONS)


def executor_java_options() -> str:
    """Executors compile methods of any size unless the JIT choice is off (they never get C1 only)."""
    return "" if forced_mode() == "off" else HUGE_METHODS_OPTIONS


def forced_mode() -> str:
    """`MILLPOND_DRIVER_JIT`: auto (the default), quick, full or off; raises SpecError for anything else."""
    forced = settings.DRIVER_JIT.choice()
    if forced not in ("auto", "quick", "full", "off"):
        raise SpecError(
            [
                f"{ENV}={settings.DRIVER_JIT.value()!r} is not a JIT mode. Fix: set it to auto (the default: quick "
                "for small runs), quick (C1 only), full (tiered, methods of any size) or off (HotSpot's "
                "defaults, no JVM option), or unset it"
            ]
        )
    return forced


def choose(pipeline: Pipeline, tables: list[str], full_refresh: bool) -> DriverJit:
    """The JIT for a run of `tables`; raises SpecError for a bad `MILLPOND_DRIVER_JIT`."""
    forced = forced_mode()
    if forced != "auto":
        return DriverJit(forced, f"{ENV}={forced}")
    if full_refresh:
        return DriverJit("full", "a full refresh rereads every landed file")
    pending = pending_input_bytes(pipeline, tables)
    if pending is None:
        return DriverJit("full", "this run's new input cannot be sized before it starts")
    limit = f"{QUICK_MAX_BYTES / 2**20:.0f} MB"
    if pending > QUICK_MAX_BYTES:
        return DriverJit("full", f"{pending / 2**20:.1f} MB of new input > {limit}")
    return DriverJit("quick", f"{pending / 2**20:.1f} MB of new input <= {limit}")


def pending_input_bytes(pipeline: Pipeline, tables: list[str]) -> int | None:
    """Bytes of input the run's entry tables have not read yet, or None if unknowable without a JVM.

    Tables downstream of another table in the same run read what that one writes, so only the run's entry tables
    count: landed files not in the file source's seen-files log, or the Delta commits after the offset the table
    last read of its one upstream table. Kafka, a join, or a first run over an existing table is not sized here.
    """
    total = 0
    for table_id in tables:
        table = pipeline.tables[table_id]
        if set(table.upstreams) & set(tables):
            continue
        sized = _pending_landed_bytes if table.reads_landing else _pending_delta_bytes
        pending = sized(pipeline, table)
        if pending is None:
            return None
        total += pending
    return total


def _pending_landed_bytes(pipeline: Pipeline, table: Table) -> int | None:
    """Bytes of the landed files the table's checkpoint has not logged as read (a folder or an object-store lake)."""
    source = pipeline.sources[table.source]
    assert isinstance(source, FileSource)  # a table reading landing files
    root = paths.landing_path(source.path)
    try:
        seen = {paths.from_uri(uri) for uri in checkpoints.seen_files(pipeline, table)}
        landed = storage.listing(root)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None  # a log Spark must read itself, or a folder this process cannot list: the default JIT
    return sum(size for relative, size, _ in landed if storage.location(root, relative) not in seen)


def _pending_delta_bytes(pipeline: Pipeline, table: Table) -> int | None:
    """Bytes of the data files added to the upstream table from the version the checkpoint's offset points at."""
    if table.reads_kafka or len(table.upstreams) != 1:
        return None
    offsets = checkpoints.log_files(paths.checkpoint_path(pipeline.name, table.id) / "offsets")
    upstream = paths.upstream_path(pipeline, table.upstreams[0])
    try:
        read_from = json.loads(offsets[-1].read_text(encoding="utf-8").splitlines()[2])["reservoirVersion"]
        return bytes_added(upstream, read_from - 1, latest_version(upstream))
    except (IndexError, OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None  # no checkpoint yet (the first run reads the whole table), or a log Spark must read itself
