"""What a pipeline is, as frozen objects: its sources, tables and their parts, and the words a spec may use.

The loader builds these once from YAML and every later step (DAG factory, runner, validate) reads them, never the
YAML: a field is checked in one place and cannot be misread in another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from millpond.spec.errors import SpecError
from millpond.spec.syntax import ddl_columns

LAYERS = ("bronze", "silver", "gold")
# Landing file formats, each with the reader options a spec must give (checked before Spark starts). json is
# millpond's own line parser; each other format is a module of millpond/driver/file_formats/.
FILE_SOURCE_FORMATS: dict[str, tuple[str, ...]] = {"json": (), "csv": (), "parquet": (), "xml": ("rowTag",)}
# Spark's file sinks a table can be written with instead of Delta.
FILE_SINK_FORMATS = ("json", "csv", "parquet")
KAFKA = "kafka"  # a source or sink format; Kafka sources are referenced as `kafka.<source name>`
DELTA = "delta"  # another job's Delta table, streamed as its change data feed: `delta.<source name>`
SOURCE_FORMATS = (*FILE_SOURCE_FORMATS, KAFKA, DELTA)
# delta: the default (foreachBatch writer); json/csv/parquet: Spark's file sink; kafka: messages to a topic
SINK_FORMATS = ("delta", *FILE_SINK_FORMATS, KAFKA)
KAFKA_VALUE_FORMATS = ("json",)
DEFAULT_KAFKA_VALUE = "to_json(struct(*))"  # a Kafka sink's message value: the whole row as JSON
OUTPUT_MODES = ("append", "complete", "update")
TIMEOUTS = ("event_time", "none")  # a stateful function's timeout (GroupStateTimeout.EventTimeTimeout / NoTimeout)
TRIGGERS = ("availableNow", "once", "processingTime")
SCHEMA_DRIFT = ("rescue", "add", "fail")  # what a json source does with fields its schema does not name
JOIN_TYPES = ("inner", "left_outer")  # stream-stream joins; left_outer: also each unmatched `from` row, with nulls
LOOKUP_TYPES = ("inner", "left_outer")  # stream-static joins, the stream on the left (what Spark supports)
STATIC_FORMATS = (*FILE_SOURCE_FORMATS, "delta")  # a static source (a dimension) is read whole each run
SCHEDULE_PRESETS = ("@once", "@hourly", "@daily", "@weekly", "@monthly", "@yearly")
LANDING = "landing"  # sources are referenced as `landing.<source name>`
# The columns bronze holds beside its source's schema (millpond.driver.sources and sinks.landing write them; here so
# that a spec's `columns:` is checked before Spark starts): the landing file of a record (not for Kafka), the time
# bronze took it, a json or Kafka record's fields the schema does not name (as JSON), and where a Kafka message was.
SOURCE_FILE_COLUMN, INGESTED_AT_COLUMN, RESCUED_COLUMN = "_source_file", "_ingested_at", "_rescued_data"
KAFKA_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")
# What Hadoop's globbing reads as a pattern in a path given to Spark's file source (which then reads other files or
# another folder), and `[`/`]` also stop delta-rs from opening a table: no lake path may hold them.
GLOB_CHARACTERS = frozenset("{}[]*?\\")
GLOB_SHOWN = " ".join(sorted(GLOB_CHARACTERS))  # as error messages list them


@dataclass(frozen=True)
class Trigger:
    kind: str = "availableNow"
    interval: str | None = None  # processingTime only


@dataclass(frozen=True)
class RateLimit:
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: str | None = None
    max_offsets_per_trigger: int | None = None  # Kafka sources only

    def reader_options(self) -> dict[str, str]:
        options = {}
        if self.max_files_per_trigger:
            options["maxFilesPerTrigger"] = str(self.max_files_per_trigger)
        if self.max_bytes_per_trigger:
            options["maxBytesPerTrigger"] = self.max_bytes_per_trigger
        if self.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        return options


@dataclass(frozen=True)
class FileSource:
    """A landing folder under the lake root; new files are picked up by the checkpointed file source."""

    name: str
    format: str
    path: str  # relative to the lake root
    schema: str  # Spark DDL
    options: Mapping[str, str] = field(default_factory=dict)
    rate_limit: RateLimit = RateLimit()
    # json only. rescue: unknown fields kept as JSON in bronze's `_rescued_data`; add: each becomes a (string)
    # bronze column; fail: the run stops before writing the batch. docs/examples.md.
    schema_drift: str = "rescue"
    # A dimension: read whole, in batch, by each run of a table that looks it up (`lookup:`); never streamed, so it
    # has no checkpoint and no quarantine, and a change to it is not new input (docs/spec.md).
    static: bool = False
    # The column holding each record's event time, and the folder layout of the landing files by that time (e.g.
    # `date=YYYY-MM-DD/hour=HH`): what `millpond run --reprocess START/END` rebuilds and reads (docs/reprocess.md).
    event_time: str | None = None
    layout: str | None = None

    @property
    def id(self) -> str:
        return f"{LANDING}.{self.name}"


@dataclass(frozen=True)
class KafkaSource:
    """Topics of a Kafka cluster, read by Spark's Kafka source: the offsets read live in the table's checkpoint.

    Values are JSON, parsed against `schema` like landing lines (malformed ones to the quarantine). The checkpoint,
    not a consumer group, records what was read, so `starting_offsets` only applies to a new checkpoint.
    """

    name: str
    bootstrap_servers: str  # host:port[,host:port], or `${ENV_VAR}` resolved when the run starts
    topics: tuple[str, ...]
    schema: str  # Spark DDL of the JSON message value
    starting_offsets: str = "earliest"  # earliest | latest | JSON {"topic": {"partition": offset}}
    value_format: str = "json"
    options: Mapping[str, str] = field(default_factory=dict)  # Kafka client settings, each `kafka.<setting>`
    rate_limit: RateLimit = RateLimit()  # max_offsets_per_trigger
    schema_drift: str = "rescue"
    format: str = KAFKA

    @property
    def id(self) -> str:
        return f"{KAFKA}.{self.name}"


@dataclass(frozen=True)
class DeltaSource:
    """A Delta table that another job writes (a CDC tool's sink, another team's table), under the lake root.

    A CDC table reads its change data feed (`cdc: {change_feed: true}`): its owner turns the feed on; millpond
    checks that before each run and never alters the table. Read whole instead, it is a dimension (`static: true`,
    a FileSource)."""

    name: str
    path: str  # relative to the lake root
    format: str = DELTA

    @property
    def id(self) -> str:
        return f"{DELTA}.{self.name}"


Source = FileSource | KafkaSource | DeltaSource


@dataclass(frozen=True)
class Watermark:
    column: str
    delay: str


@dataclass(frozen=True)
class Freshness:
    """A table's freshness goal (docs/freshness.md): its age counts from the last commit that changed its data, or
    with `event_time` from the newest value of that column the table holds; seconds."""

    warn_after: int
    error_after: int
    event_time: str | None = None


@dataclass(frozen=True)
class Window:
    column: str
    duration: str
    slide: str | None = None
    alias: str = "window"  # the output column holding the window start


@dataclass(frozen=True)
class Aggregate:
    group_by: tuple[str, ...]
    measures: tuple[tuple[str, str], ...]  # (output column, Spark SQL aggregate expression)
    window: Window | None = None


@dataclass(frozen=True)
class Join:
    """A stream-stream join: each row of the table's `from` stream matched with rows of another table's stream.

    Rows match when every `using` column is equal on both sides and the `with` row's event time minus the `from`
    row's lies in `time_range` (inclusive). Both sides carry a watermark, so Spark knows when a buffered row can no
    longer match and drops it from state (and, for left_outer, emits an unmatched `from` row with nulls).
    """

    with_table: str  # another table's id, read as a Delta stream
    using: tuple[str, ...]  # key columns, named alike on both sides (SQL's JOIN ... USING)
    watermark: Watermark | None  # on the `with` side; the `from` side's is the table's own `watermark`
    time_range: tuple[str, str]  # (min, max) of `with` time minus `from` time, signed durations
    type: str = "inner"


@dataclass(frozen=True)
class Lookup:
    """A stream-static join: each row of the table's stream matched with the rows of a static source (a dimension).

    Stateless: the dimension is read whole when a run starts, so a dimension changed between runs applies to the
    rows processed from then on; rows already written keep the values they were joined with.
    """

    dimension: str  # a static source's id, `landing.<name>`
    using: tuple[str, ...]  # key columns, named alike on both sides
    type: str = "inner"


@dataclass(frozen=True)
class Transform:
    """Either Spark SQL over the view `source`, or a pure `DataFrame -> DataFrame` function."""

    sql: str | None = None
    function: str | None = None  # "package.module:function"


@dataclass(frozen=True)
class Stateful:
    """Arbitrary per-key state: `function(key, rows, state, **options)` run by Spark's `applyInPandasWithState`.

    The state lives in the table's checkpoint (one row of `state_schema` per key); with an `event_time` timeout the
    function is called again for a key once the watermark passes the time it set, with no rows.
    """

    function: str  # "package.module:function"
    key: tuple[str, ...]
    output_schema: str  # Spark DDL of the rows the function yields
    state_schema: str  # Spark DDL of the per-key state row
    timeout: str = "event_time"
    options: Mapping[str, Any] = field(default_factory=dict)  # keyword arguments for the function

    @property
    def output_columns(self) -> tuple[str, ...]:
        return ddl_columns(self.output_schema)


SCD_TYPES = (1, 2)
# What a CDC table adds: SCD 2's version bounds, and its change store's columns; no upstream column may take these.
START_AT, END_AT = "__START_AT", "__END_AT"
CDC_SEQUENCE, CDC_DELETED = "__SEQUENCE", "__DELETED"
CDC_RESERVED = (START_AT, END_AT, CDC_SEQUENCE, CDC_DELETED)
# The columns Delta's change data feed adds to each row (`readChangeFeed`), and what a `change_feed: true` CDC table
# reads them as when its block does not say: the upstream's commit version as the sequence, a deleted row as a delete.
CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
CHANGE_FEED_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
CHANGE_FEED_DELETES = f"{CHANGE_TYPE} = 'delete'"


@dataclass(frozen=True)
class Cdc:
    """A change feed applied to the table, in Lakeflow's AUTO CDC words (docs/cdc.md).

    Each upstream row is an event of one key: an upsert, or a delete where `apply_as_deletes` holds. The newest event
    by `sequence_by` wins whatever the arrival order. SCD 1 keeps one row per key; SCD 2 one row per version, with
    `__START_AT`/`__END_AT` (sequence values). Every distinct event is kept in the table's change store
    (millpond.lake.paths.changes_path) so a late event finds its place.
    """

    keys: tuple[str, ...]
    sequence_by: tuple[str, ...]  # ties on one column broken by the next
    apply_as_deletes: str | None = None  # a SQL predicate over the upstream row
    except_columns: tuple[str, ...] = ()  # upstream columns left out of the table (or name `columns`)
    columns: tuple[str, ...] = ()
    scd_type: int = 1
    track_history_columns: tuple[str, ...] = ()  # SCD 2: only these open a version; () = every value column
    # Read the upstream's Delta change data feed (its updates and deletes too), not its appended rows.
    change_feed: bool = False


@dataclass(frozen=True)
class Sink:
    """Where a table's rows go: a Delta table (default), or files written by Spark's own file sink.

    The file sink is exactly-once through its `_spark_metadata` log (batch ids it already committed are skipped on
    replay) and writes append only; readers must read the folder through that log (`spark.read.parquet(path)`).
    """

    format: str = "delta"
    options: Mapping[str, str] = field(default_factory=dict)  # writer options, e.g. {header: 'true'} for csv
    # kafka only. At least once: a batch replayed after a crash is sent again (docs/kafka.md).
    topic: str | None = None
    bootstrap_servers: str | None = None  # host:port list or `${ENV_VAR}`, as for a Kafka source
    key: str | None = None  # Spark SQL expression over the row; no key when None
    value: str = DEFAULT_KAFKA_VALUE

    @property
    def is_file(self) -> bool:
        return self.format in FILE_SINK_FORMATS

    @property
    def is_kafka(self) -> bool:
        return self.format == KAFKA

    @property
    def is_delta(self) -> bool:
        return self.format == "delta"


@dataclass(frozen=True)
class Table:
    layer: str
    name: str
    source: str  # `landing.<source>` or another table's id
    description: str = ""
    transform: Transform | None = None
    watermark: Watermark | None = None
    dedup_keys: tuple[str, ...] = ()
    aggregate: Aggregate | None = None
    order_by: tuple[str, ...] = ()
    output_mode: str = "append"
    trigger: Trigger = Trigger()
    rate_limit: RateLimit = RateLimit()
    keys: tuple[str, ...] = ()
    expectations: str | None = None
    sink: Sink = Sink()
    join: Join | None = None
    stateful: Stateful | None = None
    lookup: Lookup | None = None  # not an upstream: a dimension is read whole each run, never streamed
    freshness: Freshness | None = None  # how old the table may grow before it is late (millpond freshness)
    cdc: Cdc | None = None  # the upstream's rows are changes applied to this table (docs/cdc.md)
    # (column, description) pairs from `columns:`: each becomes the column's comment in the Delta table's schema,
    # which every catalog and SQL client shows (millpond.driver.column_comments)
    column_comments: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        return f"{self.layer}.{self.name}"

    @property
    def upstreams(self) -> tuple[str, ...]:
        """Every source or table this one reads: `from`, then a join's `with`."""
        return (self.source, self.join.with_table) if self.join else (self.source,)

    @property
    def reads_landing(self) -> bool:
        return self.source.startswith(LANDING + ".")

    @property
    def reads_kafka(self) -> bool:
        return self.source.startswith(KAFKA + ".")

    @property
    def reads_delta_source(self) -> bool:
        """A table streaming the change data feed of a Delta table the pipeline does not write (`delta.<name>`)."""
        return self.source.startswith(DELTA + ".")

    @property
    def reads_source(self) -> bool:
        """A bronze table ingesting a source (landing files or Kafka topics): parsed, bad records quarantined."""
        return self.reads_landing or self.reads_kafka

    @property
    def is_stateful(self) -> bool:
        return bool(self.dedup_keys or self.aggregate or self.join or self.stateful)

    @property
    def merges(self) -> bool:
        """An update-mode aggregate or stateful function: each batch's rows are MERGEd into the table on `keys`."""
        return self.output_mode == "update" and (self.aggregate is not None or self.stateful is not None)

    def reads_change_feed(self, upstream: str) -> bool:
        """Whether this table reads the upstream's Delta change data feed (`cdc: {change_feed: true}`, its `from:`)
        rather than its rows."""
        return self.cdc is not None and self.cdc.change_feed and upstream == self.source

    @property
    def query_output_mode(self) -> str:
        """The mode Spark runs: update on a dedup-only table emits exactly what append does, so run append."""
        return "append" if self.output_mode == "update" and not self.merges else self.output_mode

    @property
    def aggregate_keys(self) -> tuple[str, ...]:
        """The columns that identify one aggregate row: the window start alias, then the group_by columns."""
        if not self.aggregate:
            return ()
        window = (self.aggregate.window.alias,) if self.aggregate.window else ()
        return (*window, *self.aggregate.group_by)


@dataclass(frozen=True)
class Pipeline:
    name: str
    spec_path: Path
    schedule: str
    start_date: date
    description: str = ""
    # A second DAG, `<pipeline>__reprocess`: the same tasks on this (coarser) schedule, so a backfill of it rebuilds
    # one day (say) of an hourly pipeline per run (docs/reprocess.md).
    reprocess_schedule: str | None = None
    catchup: bool = False
    retries: int = 2
    tags: tuple[str, ...] = ()
    owner: str = "millpond"
    shuffle_partitions: int = 2
    sources: Mapping[str, Source] = field(default_factory=dict)  # by id (landing.<name>, kafka.<name>, delta.<name>)
    tables: Mapping[str, Table] = field(default_factory=dict)  # by table id, in dependency order

    def table(self, table_id: str) -> Table:
        try:
            return self.tables[normalize_table_id(table_id)]
        except KeyError:
            known = ", ".join(self.tables)
            raise SpecError([f"{self.spec_path}: unknown table {table_id!r}; tables: {known}"]) from None

    def downstream(self, table_ids: list[str]) -> list[str]:
        """The tables given plus every table that reads from them, in dependency order."""
        chosen = {normalize_table_id(t) for t in table_ids}
        for table in self.tables.values():  # dependency order: one pass suffices
            if any(upstream in chosen for upstream in table.upstreams):
                chosen.add(table.id)
        return [t for t in self.tables if t in chosen]

    def upstream(self, table_id: str) -> set[str]:
        """Every table the given one reads, directly or through others."""
        found: set[str] = set()
        todo = [normalize_table_id(table_id)]
        while todo:
            table = self.tables.get(todo.pop())
            for upstream in table.upstreams if table else ():
                if upstream in self.tables and upstream not in found:
                    found.add(upstream)
                    todo.append(upstream)
        return found

    def layer_tables(self, layer: str) -> list[str]:
        return [t.id for t in self.tables.values() if t.layer == layer]

    def skips_change_commits(self, table: Table, upstream: str) -> bool:
        """Whether the table's stream of this upstream skips commits that remove rows (`skipChangeCommits`): an
        append-only table of the pipeline read as rows. Its only such commits are a reprocess's slice replacements
        (millpond.driver.reprocess), which replace the reader's slice too: read, they would count an interval
        twice."""
        source = self.tables.get(upstream)
        if source is None or table.reads_change_feed(upstream):
            return False
        return source.output_mode != "complete" and not source.merges


def normalize_table_id(table_id: str) -> str:
    """Accept both the id (`silver.activity`) and the lake path form (`silver/activity`)."""
    return table_id.strip().replace("/", ".")
