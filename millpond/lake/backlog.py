"""What the next run of a pipeline will read, per table and source, from Spark's own checkpoint files and no JVM.

Why: "how much is waiting?" is the first question before a run, and open-source Spark answers it for no file or
Delta source (Auto Loader's `numFilesOutstanding` is Databricks-only) and for Kafka only while a query runs.
The checkpoint already holds the answer's other half: what the last committed batch read.

- A file source: the landed files (listed as Spark's file source lists them, hidden names left out) that no
  committed batch logged in the checkpoint's seen-files log (`sources/0`). A batch planned but not committed
  (offsets logged, no commit: a killed run) counts as waiting, since the next run replays it first.
- A Delta source: the data files the upstream table committed after the last committed batch's offset
  (`reservoirVersion`, `index`), matched by the table's id (`reservoirId`), with their bytes and rows (each file's
  statistics). A commit the stream skips (`skipChangeCommits` on an append-only upstream, a commit that removes
  data) is not waiting; nor is one that changes no data (OPTIMIZE's rewrite). A reader of the upstream's change
  feed (`cdc: {change_feed: true}`) skips none: a commit waits with its change files (`cdc`), else with the files
  it added and removed.
- A Kafka source: the records between the last committed batch's offsets and each partition's end, asked of the
  broker with librdkafka (confluent-kafka), no JVM; a broker that does not answer within seconds is said, not
  waited for.

Batches are what the table's rate limit makes of what is waiting (Delta's default of 1,000 files per batch; a
complete-mode table on a new checkpoint reads its upstream whole, in one), the replayed batch being one of its own.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass

from millpond.lake import checkpoints, paths, storage
from millpond.lake.delta_log import file_rows, latest_version, live_files
from millpond.lake.paths import LakePath
from millpond.spec import FileSource, KafkaSource, Pipeline, Table
from millpond.spec.environment import resolve_setting

DELTA_DEFAULT_MAX_FILES = 1000  # Delta's maxFilesPerTrigger when none is set
BASE_INDEX = -1  # a Delta source offset's index before a version's first file
# How a table's stream reads its upstream's commits (_version_files): each commit's added files; none of a commit
# that removes data (`skipChangeCommits`); or the upstream's change data feed.
ROWS, ROWS_SKIPPING_CHANGES, CHANGE_FEED = "rows", "rows, skipping commits that remove data", "change feed"


@dataclass
class Waiting:
    """One source of one table: what its next run reads. `files`, `bytes` (and for Delta `rows`, `versions`) are
    None where they are not measured (a Kafka source)."""

    table: str
    source: str
    kind: str  # files | delta | kafka
    files: int | None = 0
    bytes: int | None = 0
    batches: int | None = 0
    replayed_batch: bool = False  # a batch planned and not committed is part of it
    oldest_age_seconds: float | None = None  # files: the oldest waiting file's age by its modification time
    rows: int | None = None  # delta: from each file's statistics; kafka: the records behind the topics' ends
    behind: dict[str, int] | None = None  # kafka: records behind per `<topic>/<partition>`
    versions: int | None = None  # delta: upstream versions holding waiting files
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Checkpoint:
    """The offsets of the last committed batch (None: no committed batch) and of a batch planned after it."""

    committed: list[dict] | None = None
    planned: list[dict] | None = None


def pipeline_backlog(pipeline: Pipeline, tables: list[str] | None = None, now: float | None = None) -> list[Waiting]:
    """Every streamed source of the pipeline's tables (or of `tables`), in the pipeline's order."""
    now = time.time() if now is None else now
    found = []
    for table in pipeline.tables.values():
        if tables and table.id not in tables:
            continue
        for source in table.upstreams:
            try:
                found.append(_waiting(pipeline, table, source, now))
            except (OSError, ValueError, KeyError, IndexError) as exc:  # one odd checkpoint or log: said, not raised
                found.append(_unmeasured(table, source, f"{type(exc).__name__}: {exc}"))
    return found


def _waiting(pipeline: Pipeline, table: Table, upstream: str, now: float) -> Waiting:
    state = _checkpoint_state(paths.checkpoint_path(pipeline.name, table.id))
    if table.reads_kafka:
        kafka = pipeline.sources[table.source]
        assert isinstance(kafka, KafkaSource)
        return _kafka_waiting(table, kafka, state)
    if table.reads_landing:
        landing = pipeline.sources[table.source]
        assert isinstance(landing, FileSource)
        return _files_waiting(pipeline, table, landing, state, now)
    return _delta_waiting(pipeline, table, upstream, state)


def _unmeasured(table: Table, source: str, why: str) -> Waiting:
    kind = "kafka" if table.reads_kafka else "files" if table.reads_landing else "delta"
    return Waiting(table.id, source, kind, files=None, bytes=None, batches=None, note=f"not measured: {why}")


def _checkpoint_state(checkpoint: LakePath) -> _Checkpoint:
    offsets = checkpoint / "offsets"
    commits = checkpoints.log_files(checkpoint / "commits")
    committed_batch = int(commits[-1].name.split(".")[0]) if commits else -1
    state = _Checkpoint()
    if committed_batch >= 0:
        state.committed = _offsets_entry(offsets / str(committed_batch))
    planned = [f for f in checkpoints.log_files(offsets) if int(f.name.split(".")[0]) > committed_batch]
    if planned:
        state.planned = _offsets_entry(planned[-1])
    return state


def _offsets_entry(path: LakePath) -> list[dict]:
    """An offsets log entry's source offsets, in the query's source order (`-` is a source with none yet)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) if line.strip() not in ("", "-") else {} for line in lines[2:]]


def _files_waiting(pipeline: Pipeline, table: Table, source: FileSource, state: _Checkpoint, now: float) -> Waiting:
    root = paths.landing_path(source.path)
    done_through = max((o.get("logOffset", -1) for o in state.committed or []), default=-1)
    logged = checkpoints.seen_file_batches(pipeline, table)
    done = {paths.from_uri(uri) for uri, batch in logged.items() if batch <= done_through}
    replayed = {paths.from_uri(uri) for uri, batch in logged.items() if batch > done_through}
    waiting = []
    base = storage.folder_location(root)
    for name, size, mtime_ns in storage.listing(root):
        location = f"{base}/{name}"
        if location not in done:
            waiting.append((location in replayed, mtime_ns, size))
    fresh = [size for replay, _, size in sorted(waiting) if not replay]
    limit = source.rate_limit
    if table.trigger.kind == "once":  # read in one batch whatever the limits
        batches = int(bool(fresh))
    else:
        batches = _batches(fresh, limit.max_files_per_trigger, _bytes(limit.max_bytes_per_trigger), soft_bytes=False)
    return Waiting(
        table.id,
        table.source,
        "files",
        files=len(waiting),
        bytes=sum(size for _, _, size in waiting),
        batches=batches + bool(replayed),
        replayed_batch=bool(replayed),
        oldest_age_seconds=round(now - min(m for _, m, _ in waiting) / 1e9, 3) if waiting else None,
    )


def _delta_waiting(pipeline: Pipeline, table: Table, upstream: str, state: _Checkpoint) -> Waiting:
    location = paths.upstream_path(pipeline, upstream)
    newest = latest_version(location)
    if newest < 0:
        return Waiting(table.id, upstream, "delta", rows=0, versions=0, note="the upstream table has no commit yet")
    table_id = _reservoir_id(location)
    if table_id is None and table.join:  # two Delta offsets, and none can be matched to this upstream
        return _unmeasured(table, upstream, "the upstream's table id is in no commit or checkpoint the log holds")
    committed = _offset_for(state.committed, table_id)
    planned = _offset_for(state.planned, table_id)
    # millpond.driver.sources reads a join's `with` side as it reads `from`
    reading = ROWS_SKIPPING_CHANGES if pipeline.skips_change_commits(table, upstream) else ROWS
    if table.reads_change_feed(upstream):
        reading = CHANGE_FEED
    if committed is None and planned is not None:  # a first batch planned, not committed: replayed from its snapshot
        files = _after_offset(location, {**planned, "index": BASE_INDEX, "isStartingVersion": True}, newest, reading)
        whole = table.output_mode == "complete"
    elif committed is None:  # a new checkpoint: Delta reads the snapshot at the newest version, then what follows
        files = [(newest, size, rows) for size, rows in _snapshot_files(location, newest)]
        whole = table.output_mode == "complete"  # millpond.driver.sources reads it in one batch
    else:
        files = _after_offset(location, committed, newest, reading)
        whole = False
    replayed = 0
    if planned is not None:
        replayed = max(0, len(files) - len(_after_offset(location, planned, newest, reading)))
    limit = table.rate_limit
    max_bytes = _bytes(limit.max_bytes_per_trigger)
    # Delta's admission: 1,000 files a batch unless a limit is set (a byte limit alone sets no file cap)
    max_files = limit.max_files_per_trigger or (None if max_bytes else DELTA_DEFAULT_MAX_FILES)
    later = [size for _, size, _ in files[replayed:]]
    whole = whole or reading == CHANGE_FEED  # a change feed's reader reads all that is new in one batch
    if whole or table.trigger.kind == "once":  # read in one batch whatever the limits
        batches = int(bool(later))
    else:
        batches = _batches(later, max_files, max_bytes)
    return Waiting(
        table.id,
        upstream,
        "delta",
        files=len(files),
        bytes=sum(size for _, size, _ in files),
        batches=batches + bool(replayed),
        replayed_batch=bool(replayed),
        rows=sum(rows for _, _, rows in files),
        versions=len({version for version, _, _ in files}),
    )


def _kafka_waiting(table: Table, source: KafkaSource, state: _Checkpoint) -> Waiting:
    """Records between the last committed batch's offsets (or the source's `starting_offsets` for a new checkpoint)
    and each partition's end (its high watermark), asked of the broker with librdkafka (confluent-kafka), no JVM."""
    waiting = Waiting(table.id, table.source, "kafka", files=None, bytes=None, batches=None)
    if any(key.startswith("kafka.") for key in source.options):
        waiting.note = "not measured: the source sets Kafka client options only Spark's client reads"
        return waiting
    committed = next((o for o in state.committed or [] if any(t in o for t in source.topics)), None)
    planned = next((o for o in state.planned or [] if any(t in o for t in source.topics)), None)
    try:
        ends = _kafka_ends(resolve_setting(source.bootstrap_servers), source.topics)
    except KafkaUnreachable as exc:
        waiting.note = f"not measured: {exc}"
        return waiting
    behind = {}
    for (topic, partition), (low, high) in ends.items():
        if committed is not None:
            start = int(committed.get(topic, {}).get(str(partition), low))  # a partition added since: from its start
        else:
            start = low if source.starting_offsets == "earliest" else high  # latest (or given offsets: from the end)
        behind[f"{topic}/{partition}"] = max(0, high - max(start, low))
    total = sum(behind.values())
    limit = source.rate_limit.max_offsets_per_trigger
    waiting.rows, waiting.behind = total, dict(sorted(behind.items()))
    waiting.replayed_batch = planned is not None and planned != committed
    waiting.batches = (math.ceil(total / limit) if limit else int(bool(total))) if total else 0
    waiting.batches += int(waiting.replayed_batch and waiting.batches == 0)
    return waiting


class KafkaUnreachable(RuntimeError):
    """The broker did not answer in time (or has not the topic): the backlog says so instead of waiting."""


KAFKA_TIMEOUT_SECONDS = 5.0


def _kafka_ends(bootstrap: str, topics: tuple[str, ...]) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) watermark offsets of every partition of `topics`."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition  # only for a pipeline reading Kafka

    settings = {"bootstrap.servers": bootstrap, "group.id": "millpond-backlog", "enable.auto.commit": False}
    consumer = Consumer({**settings, "log_level": 0})  # librdkafka's own connection errors: the note says it once
    try:
        metadata = consumer.list_topics(timeout=KAFKA_TIMEOUT_SECONDS)
        ends = {}
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                raise KafkaUnreachable(f"topic {topic} not found at {bootstrap}")
            for partition in described.partitions:
                marks = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=KAFKA_TIMEOUT_SECONDS)
                if marks is None:
                    raise KafkaUnreachable(f"no offsets for {topic}/{partition} from {bootstrap} in time")
                ends[(topic, partition)] = (int(marks[0]), int(marks[1]))
        return ends
    except KafkaException as exc:
        raise KafkaUnreachable(f"no answer from {bootstrap} within {KAFKA_TIMEOUT_SECONDS:.0f} s ({exc})") from None
    finally:
        consumer.close()


def _reservoir_id(location: LakePath) -> str | None:
    """The table's id (its metaData action), which a Delta source offset names as `reservoirId`: from the oldest
    JSON commit the log still holds that has one, else from the newest checkpoint (after log cleanup)."""
    log = location / "_delta_log"
    commits: list[LakePath] = list(log.glob("*.json"))
    for commit in sorted(commits, key=lambda p: p.name):
        for line in commit.read_text(encoding="utf-8").splitlines():
            if '"metaData"' in line:
                return json.loads(line)["metaData"]["id"]
    if (log / "_last_checkpoint").exists():
        import pyarrow.parquet as pq  # only a table whose early commits were cleaned up

        version = json.loads((log / "_last_checkpoint").read_text())["version"]
        parts: list[LakePath] = list(log.glob(f"{version:020d}.checkpoint*.parquet"))
        for part in parts:
            with part.open("rb") as handle:
                for meta in pq.read_table(handle, columns=["metaData"]).column("metaData").to_pylist():
                    if meta:
                        return meta["id"]
    return None


def _offset_for(entry: list[dict] | None, table_id: str | None) -> dict | None:
    """The Delta source offset of `table_id` in an offsets entry (a join has two), or None."""
    for offset in entry or []:
        if "reservoirVersion" in offset and (table_id is None or offset.get("reservoirId") == table_id):
            return offset
    return None


def _after_offset(location: LakePath, offset: dict, newest: int, reading: str) -> list[tuple[int, int, int]]:
    """(version, bytes, rows) of each data file a Delta source reads after `offset`, in its order."""
    version, index = int(offset["reservoirVersion"]), int(offset.get("index", BASE_INDEX))
    if offset.get("isStartingVersion"):
        first = [(version, size, rows) for size, rows in _snapshot_files(location, version)][
            max(index, BASE_INDEX) + 1 :
        ]
        return first + _version_files(location, version + 1, newest, reading)
    files = _version_files(location, version, newest, reading)
    if index < 0:  # BASE_INDEX, or a newer Delta's markers before a version's first file (schema tracking)
        return files
    # Part of `version` was read: its files up to `index` (Delta's END_INDEX, past the last, means all of them)
    return [f for f in files if f[0] == version][index + 1 :] + [f for f in files if f[0] != version]


def _version_files(location: LakePath, first: int, last: int, reading: str) -> list[tuple[int, int, int]]:
    """(version, bytes, rows) of each file a stream of the upstream reads in versions first..last, `reading` its
    commits as ROWS (the files each added), ROWS_SKIPPING_CHANGES (none of a commit that removes data) or
    CHANGE_FEED (a commit's change files, `cdc`, where it has any: Delta writes no row counts for them; else the
    files it added and removed, as Delta's change data feed reads them)."""
    found = []
    for version in range(first, last + 1):
        actions = [
            json.loads(line)
            for line in (location / "_delta_log" / f"{version:020d}.json").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        removes = any(a.get("remove", {}).get("dataChange", True) for a in actions if "remove" in a)
        if reading == ROWS_SKIPPING_CHANGES and removes:
            continue
        kinds: tuple[str, ...] = ("add",)
        if reading == CHANGE_FEED:
            kinds = ("cdc",) if any("cdc" in a for a in actions) else ("add", "remove")
        for action in actions:
            for kind in kinds:
                change = action.get(kind)
                if change and (kind == "cdc" or change.get("dataChange", True)):
                    found.append((version, int(change.get("size") or 0), file_rows(change.get("stats"))))
    return found


def _snapshot_files(location: LakePath, version: int) -> list[tuple[int, int]]:
    """(bytes, rows) of the table's live files at `version`, in the order Delta's source reads a starting snapshot
    (modification time, then path)."""
    found = live_files(location, version)
    live = found[1] if found else {}
    ordered = sorted(live.items(), key=lambda item: (item[1].modification_time, item[0]))
    return [(f.size, f.rows) for _, f in ordered]


def _bytes(text: str | None) -> int | None:
    """A rate limit's byte size (`512m`, `1g`, `1048576`) in bytes, as Spark reads it."""
    if not text:
        return None
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    cleaned = text.strip().lower().removesuffix("b")
    return int(cleaned[:-1]) * units[cleaned[-1]] if cleaned[-1] in units else int(cleaned)


def _batches(sizes: list[int], max_files: int | None, max_bytes: int | None, soft_bytes: bool = True) -> int:
    """How many batches a rate limit makes of files of `sizes`, taken in order. Each batch takes at least one
    file; Delta admits a file while its byte budget is left (`soft_bytes`), Spark's file source while the batch's
    total stays within it."""
    if not max_bytes:
        return math.ceil(len(sizes) / max_files) if max_files else int(bool(sizes))
    batches, taken, total = 0, 0, 0
    for size in sizes:
        full = max_files is not None and taken >= max_files
        over = total >= max_bytes if soft_bytes else total + size > max_bytes
        if taken and (full or over):
            batches, taken, total = batches + 1, 0, 0
        taken, total = taken + 1, total + size
    return batches + bool(taken)
