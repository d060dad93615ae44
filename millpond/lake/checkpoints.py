"""Check a table's streaming checkpoint before Spark uses it, so damage is an error and never a silent re-ingest.

A checkpoint is the only record of what a table has already read. Lose the file source's seen-files log and
Spark lists every landed file as new; lose the offsets and it starts over; change a stateful query's keys and the
old state means something else. Spark notices some of this, late and in its own words; this module notices it
first, says which file or which spec field, and names the recovery command.

It also keeps the table's stateful shape (source, watermark, dedup keys, aggregation, stateful function, output
mode) in `millpond.json` beside Spark's files, so a spec change the checkpoint cannot follow is refused by name.

Light on purpose (no pyspark): `millpond status` and unit tests read checkpoints without a JVM.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, cast

from millpond.lake import file_sink_log, paths, storage
from millpond.lake.delta_log import latest_version
from millpond.lake.paths import LakePath
from millpond.spec import GLOB_CHARACTERS, GLOB_SHOWN, FileSource, Pipeline, Table
from millpond.spec.reprocess import ReprocessPlan

SHAPE_FILE = "millpond.json"
INPUT_FILE = "millpond-input.json"  # what the source looked like when the table last finished a run


class CheckpointProblem(RuntimeError):
    """A checkpoint that cannot be used as it is; the message names the file or the change, and the fix."""


def full_refresh_fix(pipeline: Pipeline, table: Table) -> str:
    return f"Fix: `millpond run {pipeline.name} --full-refresh {table.id}` (rebuilds it and its downstream tables)"


def verify(pipeline: Pipeline, table: Table, rebuild: bool = False) -> None:
    """Raise CheckpointProblem if running `table` on its checkpoint could lose or duplicate rows.

    `rebuild`: a complete-mode table whose checkpoint was dropped on purpose (a reprocess rebuilds it): its first
    batch is the whole result and overwrites the table, so its rows are no reason to refuse."""
    checkpoint = paths.checkpoint_path(pipeline.name, table.id)
    # A file sink's own log counts as data: a new checkpoint restarts at batch 0, which that log would skip.
    has_data = file_sink_log.table_version(table) >= 0
    offsets = checkpoint / "offsets"
    if not log_files(offsets):
        if has_data and not (rebuild and table.output_mode == "complete" and table.sink.is_delta):
            raise CheckpointProblem(
                f"its checkpoint {checkpoint} is missing (no offsets) but the table has data; re-reading the source "
                f"would duplicate rows. {full_refresh_fix(pipeline, table)}"
            )
        return  # a new table: Spark starts the checkpoint
    fix = full_refresh_fix(pipeline, table)
    _read_metadata(checkpoint / "metadata", fix)
    latest_offsets = _read_log_entry(offsets, fix)
    _read_log_entry(checkpoint / "commits", fix, required=False)
    if table.reads_landing:
        _check_file_source_log(checkpoint, latest_offsets, fix)
    if table.is_stateful and log_files(checkpoint / "commits") and not (checkpoint / "state").is_dir():
        raise CheckpointProblem(
            f"its checkpoint's state folder {checkpoint / 'state'} is missing: the {_stateful_what(table)} "
            f"already seen would be forgotten. {fix}"
        )
    changes = shape_changes(checkpoint, table)
    if changes:
        raise CheckpointProblem(
            f"the spec changed in a way its checkpoint cannot follow: {'; '.join(changes)}. The checkpoint's state "
            f"was built for the old definition. {fix}"
        )


def shape(table: Table) -> dict:
    """What a checkpoint's state depends on. Transforms are left out: Spark accepts stateless changes."""
    return {
        "source": table.source,
        "watermark": asdict(table.watermark) if table.watermark else None,
        "dedup_keys": list(table.dedup_keys),
        "aggregate": _plain(asdict(table.aggregate)) if table.aggregate else None,
        "output_mode": table.query_output_mode,  # dedup-only update mode runs as append: switching is harmless
        # A file sink's `_spark_metadata` log counts batch ids from this checkpoint: it cannot change format.
        "sink": table.sink.format,
        # A join's state holds both sides' rows by key and event time, and its checkpoint reads two sources.
        "join": _plain(asdict(table.join)) if table.join else None,
        "stateful": _stateful_shape(table),
        # A CDC table's change store holds events by these keys and sequence, deletes by this predicate.
        "cdc": _plain(asdict(table.cdc)) if table.cdc else None,
    }


def _stateful_shape(table: Table) -> dict | None:
    """What a stateful function's saved state means: who wrote it, per which key, in which shape, with which options.

    The output schema is left out: the state does not depend on it (and Delta refuses an incompatible append).
    """
    if not table.stateful:
        return None
    stateful = table.stateful
    return _plain(
        {
            "function": stateful.function,
            "key": stateful.key,
            "state_schema": stateful.state_schema,
            "timeout": stateful.timeout,
            "options": dict(stateful.options),
        }
    )


def shape_changes(checkpoint: LakePath, table: Table) -> list[str]:
    """Field-by-field differences between the shape recorded in the checkpoint and the spec's table."""
    recorded_path = checkpoint / SHAPE_FILE
    if not recorded_path.exists():
        return []
    # Shapes recorded before file sinks, joins or stateful functions existed lack those fields.
    recorded = {"sink": "delta", "join": None, "stateful": None, "cdc": None, **json.loads(recorded_path.read_text())}
    if recorded["cdc"] is not None:  # recorded before `change_feed` existed: the appended rows were read
        recorded["cdc"] = {"change_feed": False, **recorded["cdc"]}
    current = shape(table)
    if (
        not table.is_stateful
        and not table.cdc
        and recorded["cdc"] is None
        and all(recorded.get(k) == current[k] for k in ("source", "sink"))
    ):
        return []  # a stateless query only needs the same source (and sink)
    return [
        f"{name}: {_show(recorded.get(name))} -> {_show(current[name])}"
        for name in current
        if recorded.get(name) != current[name]
    ]


def record_shape(pipeline: Pipeline, table: Table) -> None:
    """Remember the table's stateful shape once its checkpoint exists (written atomically)."""
    checkpoint = paths.checkpoint_path(pipeline.name, table.id)
    if not checkpoint.is_dir():
        return
    _write_atomically(checkpoint / SHAPE_FILE, shape(table))


def input_fingerprint(pipeline: Pipeline, table: Table) -> str:
    """The table's source as it is now: each landed file's name, size and mtime, or the upstream Delta version
    (a join: both upstreams' versions).

    Taken before the query starts, so a file landing while it runs makes the next fingerprint differ.
    """
    if table.reads_kafka:
        return "kafka"  # no listing to take without a Kafka client: `nothing_new` never skips such a table
    if table.reads_landing:
        root = paths.landing_path(cast(FileSource, pipeline.sources[table.source]).path)
        state: list = storage.listing(root)
        refuse_pattern_names(table, root, [name for name, _, _ in state])
    else:
        state = [_delta_state(paths.upstream_path(pipeline, upstream)) for upstream in table.upstreams]
        if not table.join:
            state = state[0]  # the fingerprint a table recorded before joins existed stays the same
    return hashlib.sha256(json.dumps(state).encode()).hexdigest()


def refuse_pattern_names(table: Table, root: LakePath, names: list[str]) -> None:
    """Spark's file source reads each file of a batch by its path, and a path holding a glob character is expanded
    as a pattern: the batch then reads other files twice (seen with `?` and with `[1]{a}`). Refused before the
    query starts, so nothing of the batch is read."""
    odd = [name for name in names if GLOB_CHARACTERS & set(name)]
    if odd:
        shown = ", ".join(str(root / name) for name in odd[:3]) + (f" and {len(odd) - 3} more" if len(odd) > 3 else "")
        raise CheckpointProblem(
            f"{table.id}: landing file name(s) with a glob character ({GLOB_SHOWN}): {shown}. "
            "Spark's file source would read such a name as a pattern and read other files twice. Nothing was read. "
            "Fix: rename the file(s) without those characters (or move them out of the landing folder), then rerun"
        )


def _delta_state(upstream: LakePath) -> list[int]:
    version = latest_version(upstream)
    commit = upstream / "_delta_log" / f"{version:020d}.json"
    return [version, commit.stat().st_mtime_ns if commit.exists() else 0]  # mtime: a recreated table differs


def nothing_new(pipeline: Pipeline, table: Table, fingerprint: str) -> dict | None:
    """The last finished run's record if it left every batch committed and the source has not changed since.

    Then a run would only start a query that finds nothing: Spark's file source and Delta source would read the
    same listing or version, and an event-time query has no watermark left to advance (its last run ran the
    no-data batch). Callers skip the query; a killed or gate-stopped run recorded nothing, so it is replayed.
    A table reading Kafka always runs its query: only the broker knows whether a topic has new messages, and asking
    it takes a Kafka client, which is the JVM this check exists to avoid (docs/kafka.md).
    """
    if table.reads_kafka:
        return None
    checkpoint = paths.checkpoint_path(pipeline.name, table.id)
    try:
        recorded = json.loads((checkpoint / INPUT_FILE).read_text())
    except (OSError, ValueError):
        return None
    offsets, commits = log_files(checkpoint / "offsets"), log_files(checkpoint / "commits")
    if recorded.get("fingerprint") != fingerprint or not offsets or not commits:
        return None
    return recorded if _batch_id(offsets[-1]) == _batch_id(commits[-1]) else None


def record_input(pipeline: Pipeline, table: Table, fingerprint: str, state_rows: int) -> None:
    """After a run that finished: the source fingerprint it started from (and the state size, for skipped runs)."""
    checkpoint = paths.checkpoint_path(pipeline.name, table.id)
    if checkpoint.is_dir():
        _write_atomically(checkpoint / INPUT_FILE, {"fingerprint": fingerprint, "state_rows": state_rows})


def record_described(pipeline: Pipeline, table: Table, version: int, described: str) -> None:
    """After a run gave the table the spec's column descriptions (`described`: their digest): the table's version
    then, so an idle run reads the table's schema again only when the table or the spec changed since."""
    checkpoint = paths.checkpoint_path(pipeline.name, table.id)
    if not checkpoint.is_dir():
        return
    try:
        recorded = json.loads((checkpoint / INPUT_FILE).read_text())
    except (OSError, ValueError):
        return  # no finished run recorded: the next run reads the schema
    _write_atomically(checkpoint / INPUT_FILE, {**recorded, "described": {"version": version, "columns": described}})


def _write_atomically(path: LakePath, body: dict) -> None:
    storage.write_whole(path, json.dumps(body, indent=2, sort_keys=True) + "\n")


def spark_error_fix(pipeline: Pipeline, table: Table, message: str) -> str | None:
    """The recovery hint for a Spark error that comes from the checkpoint (state or logs), else None."""
    markers = (
        "STATE_STORE",
        "StateSchemaNotCompatible",
        "CANNOT_LOAD_STATE",
        "STREAMING_STATEFUL_OPERATOR",
        "INCOMPATIBLE_DATA_FOR_STATE",
        "STREAM_FAILED_TO_READ_OFFSET",
        "CHECKPOINT_",
    )
    if any(marker in message for marker in markers):
        return f"the checkpoint {paths.checkpoint_path(pipeline.name, table.id)} does not fit this query. " + (
            full_refresh_fix(pipeline, table)
        )
    if "DELTA_MISSING_CHANGE_DATA" in message:  # the feed was off for a commit the reader has yet to read
        return (
            f"{table.source} has no change data for a commit {table.id} has not read yet (its change data feed was "
            "off then). " + full_refresh_fix(pipeline, table)
        )
    if "DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE" in message:  # a source moved, or its owner recreated it
        read = ", ".join(f"{u} at {paths.upstream_path(pipeline, u)}" for u in table.upstreams)
        return (
            f"{table.id} reads {read}: not the table its checkpoint read (recreated by its owner, or the spec's "
            f"path changed). " + full_refresh_fix(pipeline, table)
        )
    return None


# ---------------------------------------------------------------------------------------------- Spark's files


def has_batches(pipeline: Pipeline, table: Table) -> bool:
    """Whether the table's checkpoint has planned a batch (its offsets log holds one): False for a new checkpoint."""
    return bool(log_files(paths.checkpoint_path(pipeline.name, table.id) / "offsets"))


def log_files(folder: LakePath) -> list[LakePath]:
    """Batch files of a Spark metadata log (`0`, `1`, ..., `9.compact`), newest last."""
    entries = [
        p
        for p in storage.children(folder)
        if p.name.split(".")[0].isdigit() and not p.name.startswith(".") and p.is_file()
    ]
    return sorted(entries, key=lambda p: int(p.name.split(".")[0]))


def _batch_id(log_file: LakePath) -> int:
    return int(log_file.name.split(".")[0])


def _read_metadata(path: LakePath, fix: str) -> None:
    try:
        if "id" not in json.loads(path.read_text().splitlines()[0]):
            raise ValueError("no query id")
    except (OSError, IndexError, ValueError) as exc:
        raise CheckpointProblem(f"checkpoint file {path} is unreadable ({_reason(exc)}). {fix}") from None


def _read_log_entry(folder: LakePath, fix: str, required: bool = True) -> list[dict]:
    """Parse the newest entry of an offsets/commits log: a version line (`v1`) then one JSON document per line."""
    files = log_files(folder)
    if not files:
        if required:
            raise CheckpointProblem(f"checkpoint folder {folder} is empty. {fix}")
        return []
    newest = files[-1]
    try:
        lines = newest.read_text(encoding="utf-8").splitlines()
        if not lines or not lines[0].startswith("v"):
            raise ValueError("no version line")
        return [json.loads(line) if line.strip() != "-" else {} for line in lines[1:]]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointProblem(f"checkpoint file {newest} is corrupted ({_reason(exc)}). {fix}") from None


def _check_file_source_log(checkpoint: LakePath, latest_offsets: list[dict], fix: str) -> None:
    """The file source's seen-files log must reach the offset the checkpoint says was read (else: re-ingest)."""
    wanted = max((o.get("logOffset", -1) for o in latest_offsets[1:] if isinstance(o, dict)), default=-1)
    log = checkpoint / "sources" / "0"
    files = log_files(log)
    newest = int(files[-1].name.split(".")[0]) if files else -1
    if newest < wanted:
        raise CheckpointProblem(
            f"the file source's seen-files log {log} stops at batch {newest} but the offsets reach batch {wanted}: "
            f"Spark would list already-ingested files as new and duplicate them. {fix}"
        )
    if files:
        _read_log_entry(log, fix)


def _stateful_what(table: Table) -> str:
    if table.join:
        return "rows buffered for the join"
    return "aggregates" if table.aggregate else "per-key state" if table.stateful else "keys"


def _plain(value: Any) -> Any:
    """Tuples to lists, so a shape read back from JSON compares equal to a fresh one."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if value is not None else "none"


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def seen_files(pipeline: Pipeline, table: Table) -> list[str]:
    """Every file the table's file source has logged as read (URIs as Spark wrote them), from its seen-files log:
    what a reprocess may read again. A file landed since the stream's last batch is the next run's, read once by the
    stream."""
    return sorted(seen_file_batches(pipeline, table))


def seen_file_batches(pipeline: Pipeline, table: Table) -> dict[str, int]:
    """Each file the table's file source logged (its URI as Spark wrote it) and the batch that logged it: the newest
    `N.compact` holds every entry up to N, later batches one file each."""
    log = paths.checkpoint_path(pipeline.name, table.id) / "sources" / "0"
    files = log_files(log)
    compacts = [f for f in files if f.name.endswith(".compact")]
    start = _batch_id(compacts[-1]) if compacts else -1
    found: dict[str, int] = {}
    for log_file in files:
        if _batch_id(log_file) < start or (_batch_id(log_file) == start and not log_file.name.endswith(".compact")):
            continue
        for line in log_file.read_text(encoding="utf-8").splitlines()[1:]:
            if line.strip():
                entry = json.loads(line)
                found[entry["path"]] = int(entry.get("batchId", _batch_id(log_file)))
    return found


def watermark(pipeline: Pipeline, table: Table) -> datetime | None:
    """The event-time watermark the table's latest batch ran with (Spark's offsets log), or None before any batch."""
    offsets = log_files(paths.checkpoint_path(pipeline.name, table.id) / "offsets")
    if not offsets:
        return None
    lines = offsets[-1].read_text(encoding="utf-8").splitlines()
    millis = json.loads(lines[1]).get("batchWatermarkMs", 0) if len(lines) > 1 else 0
    return datetime.fromtimestamp(millis / 1000, UTC)


def open_intervals(pipeline: Pipeline, plan: ReprocessPlan, reach: datetime | None = None) -> dict[str, str]:
    """The plan's stateful slice tables whose watermark has not passed the end of what the reprocess rebuilds, each
    with the refusal a reprocess gives when that holds rows (docs/reprocess.md). `reach`: the latest end of the
    intervals rebuilt (the re-read files may hold rows of intervals after the one asked); the interval's end if None.

    Such a table's live query still holds the interval's keys in its state: a row of the interval arriving later
    would be deduplicated against keys the reprocess may have removed, or let through beside keys it added. An
    interval with no rows, before or after, has no keys in any state, so it is not refused.
    """
    end = max(reach or plan.interval.end, plan.interval.end)
    stamp = f"{end:%Y-%m-%dT%H:%M:%SZ}"
    if end == plan.interval.end:
        what = f"the interval ends at {stamp}"
        fix = "reprocess an interval ending at or before the watermark, or wait until later data moves it past the end"
    else:
        what = f"the files re-read changed rows of intervals up to {stamp}, which the reprocess rebuilds too"
        fix = (
            "check the event times in the interval's re-delivered files, or wait until later data moves the "
            f"watermark past {stamp}"
        )
    found = {}
    for table_id in pipeline.downstream(list(plan.slices)):  # a table outside the run still reads the replacement
        table = pipeline.tables[table_id]
        if not (table.watermark and table.is_stateful):
            continue
        mark = watermark(pipeline, table)
        if mark is not None and mark < end:  # None: no batch yet, so no state to disagree with
            found[table_id] = (
                f"{table_id}: {what}, after the table's "
                f"watermark {mark:%Y-%m-%dT%H:%M:%SZ} ({table.watermark.column} minus {table.watermark.delay}): rows "
                "of the interval may still arrive, and the live query would check them against keys this reprocess "
                f"replaces. Nothing was replaced. Fix: {fix}"
            )
    return found
