"""Pipeline specs: one YAML file per pipeline, loaded into frozen objects and validated before Spark starts.

Why YAML and not a Python module: a spec is data. Airflow parses it every 30 s, `millpond validate`
checks it without importing user code or starting a JVM, and reviewers read it in a pull request.
Python lives where it is needed: a table may name a `module:function` transform.

This module imports nothing heavy (no pyspark): DAG files and the CLI use it at parse time.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from millpond import settings

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: DAG parsing reads every spec

LAYERS = ("bronze", "silver", "gold")
FILE_FORMATS = ("json", "csv", "parquet")
KAFKA = "kafka"  # a source or sink format; Kafka sources are referenced as `kafka.<source name>`
SOURCE_FORMATS = (*FILE_FORMATS, KAFKA)
# delta: the default (foreachBatch writer); json/csv/parquet: Spark's file sink; kafka: messages to a topic
SINK_FORMATS = ("delta", *FILE_FORMATS, KAFKA)
KAFKA_VALUE_FORMATS = ("json",)
DEFAULT_KAFKA_VALUE = "to_json(struct(*))"  # a Kafka sink's message value: the whole row as JSON
OUTPUT_MODES = ("append", "complete", "update")
TIMEOUTS = ("event_time", "none")  # a stateful function's timeout (GroupStateTimeout.EventTimeTimeout / NoTimeout)
TRIGGERS = ("availableNow", "once", "processingTime")
SCHEMA_DRIFT = ("rescue", "add", "fail")  # what a json source does with fields its schema does not name
JOIN_TYPES = ("inner", "left_outer")  # stream-stream joins; left_outer: also each unmatched `from` row, with nulls
LOOKUP_TYPES = ("inner", "left_outer")  # stream-static joins, the stream on the left (what Spark supports)
# What Spark refuses for a stream-static join with the stream on the left: each unmatched dimension row would have to
# wait for the end of an unbounded stream.
_STREAM_LEFT_UNSUPPORTED = ("right_outer", "right", "full_outer", "full", "outer")
STATIC_FORMATS = (*FILE_FORMATS, "delta")  # a static source (a dimension) is read whole each run
SCHEDULE_PRESETS = ("@once", "@hourly", "@daily", "@weekly", "@monthly", "@yearly")
LANDING = "landing"  # sources are referenced as `landing.<source name>`
# What Hadoop's globbing reads as a pattern in a path given to Spark's file source (which then reads other files or
# another folder), and `[`/`]` also stop delta-rs from opening a table: no lake path may hold them.
GLOB_CHARACTERS = frozenset("{}[]*?\\")
GLOB_SHOWN = " ".join(sorted(GLOB_CHARACTERS))  # as error messages list them

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TABLE_ID = re.compile(r"^(bronze|silver|gold)\.[a-z][a-z0-9_]*$")
_FUNCTION_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_DURATION = re.compile(r"^\d+\s+(second|minute|hour|day|week)s?$")
_SIGNED_DURATION = re.compile(r"^-?\d+\s+(second|minute|hour|day|week)s?$")
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
_BYTES = re.compile(r"^\d+\s*[kmgt]?b?$", re.IGNORECASE)
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)
_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")  # `${NAME}`: an environment variable, read at run time
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's own rule for topic names
# Kafka client settings a spec sets through its own fields (or that Spark's Kafka source and sink refuse).
_MANAGED_KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "set bootstrap_servers instead",
    "kafka.auto.offset.reset": "set starting_offsets instead",
    "kafka.enable.auto.commit": "remove it: offsets live in the checkpoint, never in Kafka",
    "kafka.key.deserializer": "remove it: keys and values are read as bytes",
    "kafka.value.deserializer": "remove it: keys and values are read as bytes",
    "kafka.key.serializer": "remove it: set the sink's key expression",
    "kafka.value.serializer": "remove it: set the sink's value expression",
    "kafka.interceptor.classes": "remove it (Spark refuses consumer interceptors)",
}
_DDL_TYPES = (
    "string",
    "varchar",
    "char",
    "boolean",
    "tinyint",
    "byte",
    "smallint",
    "short",
    "int",
    "integer",
    "bigint",
    "long",
    "float",
    "double",
    "real",
    "decimal",
    "numeric",
    "date",
    "timestamp",
    "timestamp_ntz",
    "timestamp_ltz",
    "binary",
    "array",
    "map",
    "struct",
    "variant",
)


class SpecError(Exception):
    """Every problem found in one spec file, each naming the file, the field and the fix."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


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
    # bronze column; fail: the run stops before writing the batch. README "Bad input and schema drift".
    schema_drift: str = "rescue"
    # A dimension: read whole, in batch, by each run of a table that looks it up (`lookup:`); never streamed, so it
    # has no checkpoint and no quarantine, and a change to it is not new input (README "Joins").
    static: bool = False

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


Source = FileSource | KafkaSource


@dataclass(frozen=True)
class Watermark:
    column: str
    delay: str


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


@dataclass(frozen=True)
class Sink:
    """Where a table's rows go: a Delta table (default), or files written by Spark's own file sink.

    The file sink is exactly-once through its `_spark_metadata` log (batch ids it already committed are skipped on
    replay) and writes append only; readers must read the folder through that log (`spark.read.parquet(path)`).
    """

    format: str = "delta"
    options: Mapping[str, str] = field(default_factory=dict)  # writer options, e.g. {header: 'true'} for csv
    # kafka only. At least once: a batch replayed after a crash is sent again (README "Kafka").
    topic: str | None = None
    bootstrap_servers: str | None = None  # host:port list or `${ENV_VAR}`, as for a Kafka source
    key: str | None = None  # Spark SQL expression over the row; no key when None
    value: str = DEFAULT_KAFKA_VALUE

    @property
    def is_file(self) -> bool:
        return self.format in FILE_FORMATS

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
    catchup: bool = False
    retries: int = 2
    tags: tuple[str, ...] = ()
    owner: str = "millpond"
    shuffle_partitions: int = 2
    sources: Mapping[str, Source] = field(default_factory=dict)  # by source id (landing.<name>, kafka.<name>)
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

    def layer_tables(self, layer: str) -> list[str]:
        return [t.id for t in self.tables.values() if t.layer == layer]


def normalize_table_id(table_id: str) -> str:
    """Accept both the id (`silver.activity`) and the lake path form (`silver/activity`)."""
    return table_id.strip().replace("/", ".")


# ---------------------------------------------------------------------------------------------- loading


def spec_path_for(pipeline: str) -> Path:
    return settings.pipelines_dir() / f"{pipeline}.yaml"


def all_spec_paths() -> list[Path]:
    return sorted(settings.pipelines_dir().glob("*.yaml"))


def load_pipeline(name_or_path: str | Path, lake_root: Path | None = None) -> Pipeline:
    """Load and validate one spec; raise SpecError listing every problem."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = spec_path_for(str(name_or_path))
    if not path.exists():
        known = ", ".join(p.stem for p in all_spec_paths()) or "none"
        raise SpecError([f"{path}: no such pipeline spec (pipelines in {settings.pipelines_dir()}: {known})"])
    try:
        raw = yaml.load(path.read_text(), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise SpecError([f"{path}: not valid YAML: {exc}"]) from None
    return _Loader(path, lake_root or settings.lake_root()).pipeline(raw)


class _Loader:
    """Builds the frozen objects while collecting every problem, so a user fixes a spec in one pass."""

    def __init__(self, path: Path, lake_root: Path):
        self.path = path
        self.lake_root = lake_root
        self.problems: list[str] = []

    def problem(self, where: str, message: str, fix: str) -> None:
        self.problems.append(f"{self.path}: {where}: {message}. Fix: {fix}")

    def fields(self, where: str, raw: Any, allowed: dict[str, bool]) -> dict[str, Any]:
        """Check a mapping against its allowed fields (name -> required); unknown names are errors."""
        if not isinstance(raw, dict):
            got = type(raw).__name__
            self.problem(where or "(top level)", f"expected a mapping, got {got}", "see README 'Spec format'")
            return {}
        for key in raw:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed fields: {', '.join(allowed)}"
                self.problem(_join(where, key), f"unknown field {key!r}", hint)
        for key, required in allowed.items():
            if required and key not in raw:
                self.problem(_join(where, key), "required field is missing", f"add '{key}:' to {where or 'the spec'}")
        return raw

    # -- top level
    def pipeline(self, raw: Any) -> Pipeline:
        top = self.fields(
            "",
            raw,
            {
                "pipeline": True,
                "description": False,
                "schedule": True,
                "start_date": True,
                "catchup": False,
                "retries": False,
                "tags": False,
                "owner": False,
                "shuffle_partitions": False,
                "sources": False,
                "tables": True,
            },
        )
        name = str(top.get("pipeline", self.path.stem))
        self.lake_root_characters()
        if not _NAME.match(name):
            self.problem("pipeline", f"{name!r} is not a valid name", "use lower_snake_case (it becomes the DAG id)")
        elif name != self.path.stem:
            self.problem("pipeline", f"name {name!r} differs from the file name", f"rename the file to {name}.yaml")
        sources = {}
        raw_sources = top.get("sources") or {}
        if isinstance(raw_sources, dict):
            for source_name, raw_source in raw_sources.items():
                is_kafka = isinstance(raw_source, dict) and raw_source.get("format") == KAFKA
                source = (self.kafka_source if is_kafka else self.file_source)(str(source_name), raw_source)
                if source:
                    sources[source.id] = source
        else:
            self.problem("sources", "expected a mapping of source name -> source", "see README 'Spec format'")
        tables = {}
        raw_tables = top.get("tables") or {}
        if isinstance(raw_tables, dict) and raw_tables:
            for table_id, raw_table in raw_tables.items():
                table = self.table(str(table_id), raw_table)
                if table:
                    tables[table.id] = table
        else:
            self.problem("tables", "a pipeline needs at least one table", "add a 'tables:' mapping")
        ordered = self.dependency_order(sources, tables)
        pipeline = Pipeline(
            name=name,
            spec_path=self.path,
            schedule=self.schedule(top.get("schedule")),
            start_date=self.start_date(top.get("start_date")),
            description=str(top.get("description", "")),
            catchup=self.boolean("catchup", top.get("catchup", False)),
            retries=self.count("retries", top.get("retries", 2), minimum=0),
            tags=tuple(str(t) for t in top.get("tags") or ()),
            owner=str(top.get("owner", "millpond")),
            shuffle_partitions=self.count("shuffle_partitions", top.get("shuffle_partitions", 2), minimum=1),
            sources=sources,
            tables=ordered,
        )
        if self.problems:
            raise SpecError(self.problems)
        return pipeline

    def schedule(self, value: Any) -> str:
        text = str(value or "").strip()
        if text in SCHEDULE_PRESETS or len(text.split()) == 5:
            return text
        self.problem("schedule", f"{text!r} is not a schedule", "use a 5-field cron ('0 * * * *') or @hourly/@daily")
        return text

    def start_date(self, value: Any) -> date:
        if isinstance(value, date):
            return value
        try:
            return datetime.strptime(str(value), "%Y-%m-%d").date()
        except ValueError:
            self.problem("start_date", f"{value!r} is not a date", "use a fixed date like 2026-11-01 (never 'now')")
            return date(2026, 1, 1)

    def boolean(self, where: str, value: Any) -> bool:
        if not isinstance(value, bool):
            self.problem(where, f"{value!r} is not true/false", "use true or false")
        return bool(value)

    def count(self, where: str, value: Any, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.problem(where, f"{value!r} is not a whole number >= {minimum}", f"use a whole number >= {minimum}")
            return minimum
        return value

    # -- sources
    def file_source(self, name: str, raw: Any) -> FileSource | None:
        where = f"sources.{name}"
        spec = self.fields(
            where,
            raw,
            {
                "format": True,
                "path": True,
                "schema": False,
                "options": False,
                "rate_limit": False,
                "schema_drift": False,
                "static": False,
            },
        )
        if not _NAME.match(name):
            self.problem(where, f"{name!r} is not a valid source name", "use lower_snake_case")
        static = self.boolean(f"{where}.static", spec.get("static", False))
        fmt = str(spec.get("format", ""))
        if spec and fmt not in (STATIC_FORMATS if static else FILE_FORMATS):
            fix = (
                f"use one of {', '.join(STATIC_FORMATS)}"
                if static
                else f"use one of {', '.join(SOURCE_FORMATS)}"
                + (" (a delta dimension needs 'static: true')" if fmt == "delta" else "")
            )
            self.problem(f"{where}.format", f"unknown format {fmt!r}", fix)
        if static:
            for name_ in ("rate_limit", "schema_drift"):
                if name_ in spec:
                    self.problem(
                        f"{where}.{name_}",
                        f"a static source is read whole each run, so {name_} does not apply",
                        "remove it, or drop 'static: true' to stream the source",
                    )
        schema = spec.get("schema")
        if spec and not schema and not (static and fmt == "delta"):
            self.problem(
                f"{where}.schema",
                "a file source needs a schema (inferring one per run drifts silently)",
                "add 'schema:' with Spark DDL, e.g. 'id BIGINT, name STRING'",
            )
        elif schema:
            self.ddl(f"{where}.schema", str(schema))
        options = spec.get("options") or {}
        if not isinstance(options, dict):
            self.problem(f"{where}.options", "expected a mapping of reader options", "e.g. options: {header: 'true'}")
            options = {}
        path = str(spec.get("path", ""))
        self.lake_path(f"{where}.path", path)
        drift = self.schema_drift(f"{where}.schema_drift", fmt, spec.get("schema_drift"))
        if not spec:
            return None
        return FileSource(
            name=name,
            format=fmt,
            path=path,
            schema=str(schema or ""),
            options={str(k): str(v) for k, v in options.items()},
            rate_limit=self.rate_limit(f"{where}.rate_limit", spec.get("rate_limit")),
            schema_drift=drift,
            static=static,
        )

    def kafka_source(self, name: str, raw: Any) -> KafkaSource | None:
        where = f"sources.{name}"
        spec = self.fields(
            where,
            raw,
            {
                "format": True,
                "bootstrap_servers": True,
                "subscribe": True,
                "schema": False,
                "value_format": False,
                "starting_offsets": False,
                "options": False,
                "rate_limit": False,
                "schema_drift": False,
            },
        )
        if not _NAME.match(name):
            self.problem(where, f"{name!r} is not a valid source name", "use lower_snake_case")
        if not spec:
            return None
        schema = spec.get("schema")
        if not schema:
            self.problem(
                f"{where}.schema",
                "a kafka source needs the schema of its JSON message values (inferring one per run drifts silently)",
                "add 'schema:' with Spark DDL, e.g. 'device STRING, ts TIMESTAMP'",
            )
        else:
            self.ddl(f"{where}.schema", str(schema))
        value_format = str(spec.get("value_format", "json"))
        if value_format not in KAFKA_VALUE_FORMATS:
            self.problem(
                f"{where}.value_format",
                f"unknown value format {value_format!r}",
                "use json (one JSON object per message value; avro and protobuf are not supported yet)",
            )
        topics = self.topics(f"{where}.subscribe", spec.get("subscribe"))
        return KafkaSource(
            name=name,
            bootstrap_servers=self.bootstrap_servers(f"{where}.bootstrap_servers", spec.get("bootstrap_servers")),
            topics=topics,
            schema=str(schema or ""),
            starting_offsets=self.starting_offsets(f"{where}.starting_offsets", spec.get("starting_offsets"), topics),
            value_format=value_format,
            options=self.kafka_options(f"{where}.options", spec.get("options")),
            rate_limit=self.rate_limit(f"{where}.rate_limit", spec.get("rate_limit"), kafka=True),
            schema_drift=self.schema_drift(f"{where}.schema_drift", "json", spec.get("schema_drift")),
        )

    def bootstrap_servers(self, where: str, raw: Any) -> str:
        """`host:port[,host:port]`, or `${NAME}`: the value of an environment variable when the run starts."""
        text = str(raw or "").strip()
        if raw is None or _ENV_REF.match(text):
            return text
        if not all(_HOST_PORT.match(server.strip()) for server in text.split(",")):
            self.problem(
                where,
                f"{raw!r} is neither host:port[,host:port...] nor ${{ENV_VAR}}",
                "write e.g. ${MILLPOND_KAFKA_BOOTSTRAP} (quoted inside {...}), read when the run starts, or "
                "broker1:9092,broker2:9092",
            )
        return text

    def topics(self, where: str, raw: Any) -> tuple[str, ...]:
        names = [raw] if isinstance(raw, str) else raw
        if not isinstance(names, list) or not names or not all(isinstance(t, str) and _TOPIC.match(t) for t in names):
            self.problem(
                where,
                f"{raw!r} is not a list of topic names (letters, digits, '.', '_', '-')",
                "write e.g. subscribe: [device_events] (several topics: a YAML list, not 'a,b')",
            )
            return ()
        return tuple(names)

    def starting_offsets(self, where: str, raw: Any, topics: tuple[str, ...]) -> str:
        """earliest (default: a bronze table wants every retained message), latest, or offsets per partition."""
        if raw is None:
            return "earliest"
        if raw in ("earliest", "latest"):
            return str(raw)
        fix = (
            "use earliest, latest, or {<topic>: {<partition>: <offset>}} (offset -2 = earliest, -1 = latest) for "
            "subscribed topics"
        )
        if not isinstance(raw, dict) or not raw:
            self.problem(where, f"{raw!r} is not a starting position", fix)
            return "earliest"
        offsets: dict[str, dict[str, int]] = {}
        for topic, partitions in raw.items():
            if topic not in topics:
                self.problem(f"{where}.{topic}", "not a subscribed topic", f"{fix}; subscribed: {', '.join(topics)}")
                continue
            good = (
                isinstance(partitions, dict)
                and partitions
                and all(
                    str(p).isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= -2
                    for p, o in partitions.items()
                )
            )
            if not good:
                self.problem(f"{where}.{topic}", f"{partitions!r} is not {{partition: offset}}", fix)
                continue
            offsets[str(topic)] = {str(p): o for p, o in partitions.items()}
        return json.dumps(offsets, sort_keys=True)

    def kafka_options(self, where: str, raw: Any) -> dict[str, str]:
        """Kafka client settings (security, timeouts): each `kafka.<setting>`; what the spec manages is refused."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem(
                where,
                "expected a mapping of Kafka client settings",
                "e.g. options: {kafka.security.protocol: SASL_SSL}",
            )
            return {}
        for key in raw:
            if str(key) in _MANAGED_KAFKA_OPTIONS:
                self.problem(f"{where}.{key}", "millpond sets this itself", _MANAGED_KAFKA_OPTIONS[str(key)])
            elif not str(key).startswith("kafka."):
                self.problem(
                    f"{where}.{key}",
                    "not a Kafka client setting",
                    f"prefix Kafka client settings with 'kafka.' (kafka.{key}); topics, offsets and rate "
                    "limits have their own fields",
                )
        return {str(k): str(v) for k, v in raw.items()}

    def schema_drift(self, where: str, fmt: str, raw: Any) -> str:
        if raw is None:
            return "rescue"
        if str(raw) not in SCHEMA_DRIFT:
            self.problem(
                where,
                f"unknown policy {raw!r}",
                "use rescue (default: keep new fields as JSON in _rescued_data), add (new fields become "
                "columns) or fail (stop the run)",
            )
            return "rescue"
        if fmt != "json":
            self.problem(
                where,
                f"schema_drift applies to json sources only, not {fmt}",
                "remove it (a csv line with extra fields is quarantined as 'too many fields')",
            )
        return str(raw)

    def lake_root_characters(self) -> None:
        """The lake root (MILLPOND_LAKE) is part of every path Spark reads: a glob character there reads another
        folder (seen: a root `lake[1]` ingested `lake1`'s files), and delta-rs cannot open a path with `[`."""
        if odd := " ".join(sorted(GLOB_CHARACTERS & set(str(self.lake_root)))):
            self.problem(
                "lake root",
                f"{self.lake_root} holds {odd}, which Spark's file source reads as a glob "
                "pattern (it would read another folder's files)",
                f"move the lake to a folder whose path has none of {GLOB_SHOWN} and set MILLPOND_LAKE to it",
            )

    def lake_path(self, where: str, path: str) -> None:
        if not path:
            return
        if odd := " ".join(sorted(GLOB_CHARACTERS & set(path))):
            self.problem(
                where,
                f"{path!r} holds {odd}, which Spark's file source reads as a glob pattern (it would "
                "read other files or folders)",
                f"rename the folder without {GLOB_SHOWN}",
            )
            return
        if Path(path).is_absolute():
            self.problem(where, f"{path!r} is absolute", "give a path relative to the lake root ($MILLPOND_LAKE)")
            return
        root = self.lake_root.resolve()
        if not (root / path).resolve().is_relative_to(root):
            self.problem(where, f"{path!r} points outside the lake root {root}", "keep paths inside $MILLPOND_LAKE")

    def ddl(self, where: str, text: str) -> None:
        """Light DDL check without a JVM: `name TYPE` pairs separated by top-level commas."""
        for column in _ddl_parts(text):
            parts = column.replace("`", "").split(None, 1)
            base = parts[1].split("<")[0].split("(")[0].strip().lower() if len(parts) == 2 else ""
            if len(parts) != 2 or base.split()[0] not in _DDL_TYPES:
                self.problem(where, f"{column!r} is not 'name TYPE'", "write Spark DDL, e.g. 'Device STRING, x DOUBLE'")

    def stateful(self, where: str, raw: Any) -> Stateful | None:
        if raw is None:
            return None
        spec = self.fields(
            where,
            raw,
            {
                "function": True,
                "key": True,
                "output_schema": True,
                "state_schema": True,
                "timeout": False,
                "options": False,
            },
        )
        if not spec:
            return None
        options = spec.get("options") or {}
        if not isinstance(options, dict):
            self.problem(
                f"{where}.options",
                "expected a mapping of keyword arguments for the function",
                "e.g. options: {timestamp: ts, gap: 30 minutes}",
            )
            options = {}
        function = str(spec.get("function") or "")
        if "function" in spec and not _FUNCTION_REF.match(function):
            self.problem(
                f"{where}.function",
                f"{function!r} is not 'module:function'",
                "e.g. spark_jobs.transforms.sessions:sessions",
            )
        elif function:
            for field_name, message, fix in function_problems(function, [str(k) for k in options]):
                self.problem(f"{where}.{field_name}", message, fix)
        key = self.columns(f"{where}.key", spec.get("key"))
        if "key" in spec and spec.get("key") in (None, [], ""):
            self.problem(
                f"{where}.key",
                "a stateful function keeps one state per key, and no key column is given",
                "e.g. key: [Device]",
            )
        for name in ("output_schema", "state_schema"):
            if name in spec:
                self.ddl(f"{where}.{name}", str(spec.get(name) or ""))
        arrays = [c for c in _ddl_parts(str(spec.get("state_schema") or "")) if re.search(r"\barray\s*<", c, re.I)]
        if arrays:
            self.problem(
                f"{where}.state_schema",
                f"{', '.join(map(repr, arrays))}: PySpark 4.2's Python worker cannot "
                "read an ARRAY column of a state schema (the query fails on its first batch)",
                "keep the list in a STRING column (e.g. JSON), as spark_jobs.transforms.sessions does",
            )
        timeout = str(spec.get("timeout", "event_time"))
        if timeout not in TIMEOUTS:
            self.problem(
                f"{where}.timeout",
                f"unknown timeout {timeout!r}",
                "use event_time (the function is called again once the watermark passes the time it set) or none",
            )
        return Stateful(
            function,
            key,
            str(spec.get("output_schema") or ""),
            str(spec.get("state_schema") or ""),
            timeout,
            {str(k): v for k, v in options.items()},
        )

    def stateful_rules(self, where: str, table: Table) -> None:
        """What applyInPandasWithState needs from the rest of the table."""
        stateful = table.stateful
        assert stateful is not None
        others = [name for name, present in (("aggregate", table.aggregate), ("dedup", table.dedup_keys)) if present]
        if others:
            moved = " and ".join(others)
            self.problem(
                f"{where}.stateful",
                f"a stateful function cannot share a table with {' or '.join(others)} "
                "(two stateful operators in one query, each with its own output-mode rules)",
                f"move the {moved} to the table this one reads (or to one that reads it)",
            )
        if stateful.timeout == "event_time" and not table.watermark:
            self.problem(
                f"{where}.stateful.timeout",
                "an event_time timeout fires once the watermark passes the time "
                "the function set, and this table has no watermark",
                "add 'watermark: {column: <event time>, delay: ...}', or use timeout: none",
            )

    def rate_limit(self, where: str, raw: Any, kafka: bool = False) -> RateLimit:
        if raw is None:
            return RateLimit()
        if kafka:
            spec = self.fields(where, raw, {"max_offsets_per_trigger": False})
            offsets = spec.get("max_offsets_per_trigger")
            if offsets is not None:
                self.count(f"{where}.max_offsets_per_trigger", offsets, minimum=1)
            return RateLimit(max_offsets_per_trigger=offsets if isinstance(offsets, int) else None)
        spec = self.fields(where, raw, {"max_files_per_trigger": False, "max_bytes_per_trigger": False})
        files = spec.get("max_files_per_trigger")
        if files is not None:
            self.count(f"{where}.max_files_per_trigger", files, minimum=1)
        size = spec.get("max_bytes_per_trigger")
        if size is not None and not _BYTES.match(str(size)):
            self.problem(f"{where}.max_bytes_per_trigger", f"{size!r} is not a size", "use e.g. 512m or 1g")
        return RateLimit(files if isinstance(files, int) else None, str(size) if size is not None else None)

    # -- tables
    def table(self, table_id: str, raw: Any) -> Table | None:
        where = f"tables.{table_id}"
        spec = self.fields(
            where,
            raw,
            {
                "from": True,
                "description": False,
                "transform": False,
                "watermark": False,
                "dedup": False,
                "aggregate": False,
                "order_by": False,
                "output_mode": False,
                "trigger": False,
                "rate_limit": False,
                "keys": False,
                "expectations": False,
                "sink": False,
                "join": False,
                "stateful": False,
                "lookup": False,
            },
        )
        if not _TABLE_ID.match(table_id):
            self.problem(
                where,
                f"{table_id!r} is not '<layer>.<name>'",
                f"name tables <layer>.<lower_snake_name> with layer in {', '.join(LAYERS)}",
            )
            return None
        if not spec:
            return None
        layer, name = table_id.split(".")
        mode = str(spec.get("output_mode", "append"))
        if mode not in OUTPUT_MODES:
            modes = ", ".join(OUTPUT_MODES)
            self.problem(f"{where}.output_mode", f"unknown output mode {mode!r}", f"use one of {modes}")
        table = Table(
            layer=layer,
            name=name,
            source=normalize_table_id(str(spec.get("from", ""))),
            description=str(spec.get("description", "")),
            transform=self.transform(f"{where}.transform", spec.get("transform")),
            watermark=self.watermark(f"{where}.watermark", spec.get("watermark")),
            dedup_keys=self.columns(
                f"{where}.dedup.keys",
                (self.fields(f"{where}.dedup", spec["dedup"], {"keys": True}).get("keys") if "dedup" in spec else None),
            ),
            aggregate=self.aggregate(f"{where}.aggregate", spec.get("aggregate")),
            order_by=self.columns(f"{where}.order_by", spec.get("order_by")),
            output_mode=mode,
            trigger=self.trigger(f"{where}.trigger", spec.get("trigger", "availableNow")),
            rate_limit=self.rate_limit(f"{where}.rate_limit", spec.get("rate_limit")),
            keys=self.columns(f"{where}.keys", spec.get("keys")),
            expectations=str(spec["expectations"]) if spec.get("expectations") else None,
            sink=self.sink(f"{where}.sink", spec.get("sink")),
            join=self.join(f"{where}.join", spec.get("join")),
            stateful=self.stateful(f"{where}.stateful", spec.get("stateful")),
            lookup=self.lookup(f"{where}.lookup", spec.get("lookup")),
        )
        self.streaming_rules(where, table)
        if table.lookup and table.reads_source:
            self.problem(
                f"{where}.lookup",
                "a table reading landing files or Kafka ingests them as they are (with quarantine)",
                f"look the dimension up in a table with 'from: {table.id}'",
            )
        if table.join:
            self.join_rules(where, table)
        if table.stateful:
            self.stateful_rules(where, table)
        if table.sink.is_file:
            self.file_sink_rules(where, table)
        if table.sink.is_kafka:
            self.kafka_sink_rules(where, table)
        if table.expectations:
            self.suite_rules(where, table)
        return table

    def without_bare_on(self, where: str, raw: Any) -> Any:
        """YAML 1.1 reads a bare `on:` key as the boolean true: report it and drop it."""
        if isinstance(raw, dict) and True in raw:
            self.problem(
                f"{where}.on",
                "YAML reads the key 'on' as true, so it never names the join keys",
                "write the keys as using: [column, ...]",
            )
            return {k: v for k, v in raw.items() if k is not True}
        return raw

    def join(self, where: str, raw: Any) -> Join | None:
        if raw is None:
            return None
        raw = self.without_bare_on(where, raw)
        spec = self.fields(
            where, raw, {"with": True, "using": True, "type": False, "watermark": True, "time_range": True}
        )
        kind = str(spec.get("type", "inner"))
        if kind not in JOIN_TYPES:
            self.problem(
                f"{where}.type",
                f"unknown join type {kind!r}",
                f"use one of {', '.join(JOIN_TYPES)} (inner: matched pairs only; left_outer: also each "
                "unmatched 'from' row once, with nulls)",
            )
        using = self.columns(f"{where}.using", spec.get("using"))
        if "using" in spec and not using:
            self.problem(
                f"{where}.using",
                "a join needs at least one key column, equal on both sides",
                "write e.g. using: [impression_id]",
            )
        return Join(
            with_table=normalize_table_id(str(spec.get("with", ""))),
            using=using,
            watermark=self.watermark(f"{where}.watermark", spec.get("watermark")),
            time_range=self.time_range(f"{where}.time_range", spec.get("time_range")),
            type=kind,
        )

    def lookup(self, where: str, raw: Any) -> Lookup | None:
        """A stream-static join. Stateless, so no watermark or time range; the stream stays on the left."""
        if raw is None:
            return None
        raw = self.without_bare_on(where, raw)
        if isinstance(raw, dict):
            for name in ("watermark", "time_range"):
                if name in raw:
                    self.problem(
                        f"{where}.{name}",
                        "a lookup (stream-static join) keeps no state: each stream row "
                        f"is joined with the whole dimension as it is when the run starts, so a {name} "
                        "has nothing to bound",
                        f"remove '{name}:' (a stream-stream join, which needs it, is 'join:')",
                    )
            raw = {k: v for k, v in raw.items() if k not in ("watermark", "time_range")}
        spec = self.fields(where, raw, {"with": True, "using": True, "type": False})
        kind = str(spec.get("type", "inner"))
        if kind in _STREAM_LEFT_UNSUPPORTED:
            self.problem(
                f"{where}.type",
                f"Spark does not run a {kind} stream-static join with the stream on the "
                "left: a dimension row nobody matched could only be emitted once the (unbounded) stream "
                "ends",
                "use inner or left_outer (every stream row once, with nulls when no dimension row matches)",
            )
        elif kind not in LOOKUP_TYPES:
            self.problem(
                f"{where}.type",
                f"unknown lookup type {kind!r}",
                f"use one of {', '.join(LOOKUP_TYPES)} (inner: stream rows with a dimension row only; "
                "left_outer: every stream row, with nulls when none matches)",
            )
        using = self.columns(f"{where}.using", spec.get("using"))
        if "using" in spec and not using:
            self.problem(
                f"{where}.using",
                "a lookup needs at least one key column, equal on both sides",
                "write e.g. using: [ad_id]",
            )
        return Lookup(normalize_table_id(str(spec.get("with", ""))), using, kind)

    def lookup_upstream_rules(self, sources: dict[str, Source], tables: dict[str, Table], table: Table) -> None:
        """A lookup's `with` is a static source; its keys are columns of that source's schema."""
        if not table.lookup or not table.lookup.dimension:
            return
        where, dimension = f"tables.{table.id}.lookup", table.lookup.dimension
        static = [s.id for s in sources.values() if isinstance(s, FileSource) and s.static]
        source = sources.get(dimension)
        if dimension in tables:
            self.problem(
                f"{where}.with",
                f"{dimension} is a table, and a lookup reads a static source",
                "join a table's stream with 'join:', or declare its folder as a source with 'static: true, "
                "format: delta' and look that up",
            )
        elif source is None:
            self.problem(
                f"{where}.with",
                f"unknown dimension {dimension!r}",
                f"look up one of: {', '.join(static)}"
                if static
                else "declare it under 'sources:' with "
                "'static: true' (format, path, schema) and name it here as landing.<name>",
            )
        elif not (isinstance(source, FileSource) and source.static):
            self.problem(
                f"{where}.with",
                f"{dimension} is a streaming source (new files or messages are read once "
                "each), and a lookup reads a dimension whole every run",
                f"mark sources.{source.name} 'static: true' if it is a dimension, or read it in a bronze "
                "table and join that with 'join:'",
            )
        elif source.schema:
            columns = ddl_columns(source.schema)
            missing = [key for key in table.lookup.using if key.lower() not in {c.lower() for c in columns}]
            if missing:
                self.problem(
                    f"{where}.using",
                    f"{', '.join(missing)} not in {dimension}'s schema",
                    f"use columns of sources.{source.name}.schema: {', '.join(columns)}",
                )

    def time_range(self, where: str, raw: Any) -> tuple[str, str]:
        """`{min: ..., max: ...}`: signed durations, min <= max (the `with` side's time minus the `from` side's)."""
        if raw is None:
            return ("", "")
        spec = self.fields(where, raw, {"min": True, "max": True})
        bounds = []
        for name in ("min", "max"):
            value = str(spec.get(name, "")).strip()
            if name in spec and not _SIGNED_DURATION.match(value):
                self.problem(
                    f"{where}.{name}",
                    f"{spec.get(name)!r} is not a duration",
                    "write e.g. '0 seconds', '1 hour' or '-10 minutes' (before the 'from' row's time)",
                )
            bounds.append(value)
        low, high = signed_seconds(bounds[0]), signed_seconds(bounds[1])
        if low is not None and high is not None and low > high:
            self.problem(
                where, f"min {bounds[0]!r} is after max {bounds[1]!r}: no row could ever match", "give min <= max"
            )
        return (bounds[0], bounds[1])

    def sink(self, where: str, raw: Any) -> Sink:
        if raw is None:
            return Sink()
        if isinstance(raw, dict) and raw.get("format") == KAFKA:
            return self.kafka_sink(where, raw)
        spec = self.fields(where, raw, {"format": True, "options": False})
        fmt = str(spec.get("format", "delta"))
        if spec and fmt not in SINK_FORMATS:
            self.problem(f"{where}.format", f"unknown sink format {fmt!r}", f"use one of {', '.join(SINK_FORMATS)}")
            fmt = "delta"
        options = spec.get("options") or {}
        if not isinstance(options, dict):
            self.problem(f"{where}.options", "expected a mapping of writer options", "e.g. options: {header: 'true'}")
            options = {}
        if options and fmt == "delta":
            self.problem(
                f"{where}.options",
                "writer options apply to file sinks only",
                "remove them, or set sink.format to parquet, json or csv",
            )
        return Sink(fmt, {str(k): str(v) for k, v in options.items()})

    def kafka_sink(self, where: str, raw: dict) -> Sink:
        spec = self.fields(
            where,
            raw,
            {"format": True, "topic": True, "bootstrap_servers": True, "key": False, "value": False, "options": False},
        )
        topic = spec.get("topic")
        if topic is not None and not (isinstance(topic, str) and _TOPIC.match(topic)):
            self.problem(
                f"{where}.topic",
                f"{topic!r} is not a topic name (letters, digits, '.', '_', '-')",
                "write e.g. topic: device_alerts",
            )
        expressions = {}
        for name in ("key", "value"):
            value = spec.get(name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                self.problem(
                    f"{where}.{name}",
                    f"{value!r} is not a Spark SQL expression",
                    f"write e.g. {name}: {'device' if name == 'key' else DEFAULT_KAFKA_VALUE}",
                )
                value = None
            expressions[name] = value
        return Sink(
            KAFKA,
            self.kafka_options(f"{where}.options", spec.get("options")),
            topic=str(topic or ""),
            bootstrap_servers=self.bootstrap_servers(f"{where}.bootstrap_servers", spec.get("bootstrap_servers")),
            key=expressions["key"],
            value=expressions["value"] or DEFAULT_KAFKA_VALUE,
        )

    def kafka_sink_rules(self, where: str, table: Table) -> None:
        """What a Kafka topic can take: appended messages, sent at least once, from a table reading Delta."""
        if table.output_mode == "complete":
            self.problem(
                f"{where}.output_mode",
                "a Kafka sink appends messages, and complete mode would send the whole result again every batch",
                "use output_mode: update (each changed row is sent once per batch) or append",
            )
        if table.expectations:
            self.problem(
                f"{where}.expectations",
                "the quality gate writes passing rows and set-aside rows to Delta "
                "(write-audit-publish), so it cannot gate a Kafka sink",
                "gate the Delta table this one reads, or drop 'sink:'",
            )
        if table.reads_source:
            self.problem(
                f"{where}.sink",
                "a table reading a source splits each batch into the table and its Delta "
                "quarantine, which a Kafka sink cannot do",
                f"keep {table.id} on Delta and add a table with 'from: {table.id}' and this sink",
            )

    def file_sink_rules(self, where: str, table: Table) -> None:
        """What Spark's file sink cannot do, or what millpond's Delta-only machinery around a table needs."""
        fmt = table.sink.format
        if table.output_mode != "append":
            self.problem(
                f"{where}.output_mode",
                f"a {fmt} file sink writes in append mode only (Spark's file sink "
                f"cannot rewrite or update rows), not {table.output_mode}",
                "use output_mode: append (an aggregate then needs a watermark), or drop 'sink:' to write Delta",
            )
        if table.expectations:
            self.problem(
                f"{where}.expectations",
                "the quality gate writes passing rows and set-aside rows to Delta "
                "(write-audit-publish), so it cannot gate a file sink",
                "gate the Delta table this one reads, or drop 'sink:'",
            )
        if table.reads_source:
            self.problem(
                f"{where}.sink",
                f"a table reading {'landing files' if table.reads_landing else 'Kafka'} "
                "splits each batch into the table and its Delta quarantine, which a file sink cannot do",
                f"keep {table.id} on Delta and add a table with 'from: {table.id}' and this sink",
            )

    def join_rules(self, where: str, table: Table) -> None:
        """What a stream-stream join needs to run in bounded state, and what millpond keeps out of a join table."""
        join = table.join
        assert join is not None
        if not table.watermark:
            self.problem(
                f"{where}.watermark",
                "a join buffers the rows of both sides in state until the watermarks "
                "say they can no longer match; without a watermark on the 'from' side its rows stay forever",
                "add 'watermark: {column: <the from side's event time>, delay: ...}'",
            )
        if table.output_mode != "append":
            self.problem(
                f"{where}.output_mode",
                f"a stream-stream join emits each joined row once and runs in "
                f"append mode only, not {table.output_mode}",
                f"use output_mode: append, and aggregate in a table with 'from: {table.id}'",
            )
        if table.aggregate or table.dedup_keys or table.stateful:
            what = "aggregate" if table.aggregate else "dedup" if table.dedup_keys else "stateful"
            self.problem(
                f"{where}.{what}",
                f"a join table cannot also {'run a stateful function' if table.stateful else what} "
                "(one stateful step per table keeps each table's state and its checkpoint rules simple)",
                f"do it in a table with 'from: {table.id}'",
            )
        if table.expectations:
            self.problem(
                f"{where}.expectations",
                "a join table cannot be gated: `millpond check` replays one "
                "upstream's Delta versions, and a join reads two",
                f"gate a table with 'from: {table.id}'",
            )

    def suite_rules(self, where: str, table: Table) -> None:
        """The suite follows the naming scheme, gates a table that can hold rows back, and is well-formed."""
        from millpond.spec.suites import check_suite  # light: JSON only, no GX

        expected = f"{self.path.stem}.{table.id}"
        if table.expectations != expected:
            self.problem(
                f"{where}.expectations",
                f"suite {table.expectations!r} breaks the naming scheme",
                f"name it {expected!r} (expectations/{expected}.json)",
            )
        if table.reads_source:
            self.problem(
                f"{where}.expectations",
                "a table reading landing files or Kafka cannot be gated",
                "put the suite on the table that reads it",
            )
        self.problems.extend(check_suite(str(table.expectations)))

    def columns(self, where: str, raw: Any) -> tuple[str, ...]:
        if raw is None:
            return ()
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(c, str) and c for c in raw):
            self.problem(where, f"{raw!r} is not a list of column names", "write e.g. [Device, Index]")
            return ()
        return tuple(raw)

    def transform(self, where: str, raw: Any) -> Transform | None:
        if raw is None:
            return None
        spec = self.fields(where, raw, {"sql": False, "function": False})
        sql, function = spec.get("sql"), spec.get("function")
        if bool(sql) == bool(function):
            self.problem(
                where,
                "give exactly one of 'sql' or 'function'",
                "sql: SELECT ... FROM source  |  function: package.module:function",
            )
        if function and not _FUNCTION_REF.match(str(function)):
            self.problem(
                f"{where}.function",
                f"{function!r} is not 'module:function'",
                "e.g. spark_jobs.transforms.activity:clean",
            )
        elif function and _find_module(str(function).split(":")[0]) is None:
            self.problem(
                f"{where}.function",
                f"module {str(function).split(':')[0]!r} not found",
                "put transforms in spark_jobs/transforms/<pipeline>.py",
            )
        if sql and not re.search(r"\bsource\b", str(sql), re.IGNORECASE):
            self.problem(f"{where}.sql", "the query does not read the view 'source'", "write ... FROM source")
        return Transform(sql=str(sql) if sql else None, function=str(function) if function else None)

    def watermark(self, where: str, raw: Any) -> Watermark | None:
        if raw is None:
            return None
        spec = self.fields(where, raw, {"column": True, "delay": True})
        self.duration(f"{where}.delay", spec.get("delay"))
        return Watermark(str(spec.get("column", "")), str(spec.get("delay", "")))

    def duration(self, where: str, value: Any) -> None:
        if value is not None and not _DURATION.match(str(value).strip()):
            self.problem(where, f"{value!r} is not a duration", "write e.g. '10 minutes' or '1 hour'")

    def aggregate(self, where: str, raw: Any) -> Aggregate | None:
        if raw is None:
            return None
        spec = self.fields(where, raw, {"group_by": False, "window": False, "measures": True})
        window = None
        if spec.get("window") is not None:
            w = self.fields(
                f"{where}.window", spec["window"], {"column": True, "duration": True, "slide": False, "as": False}
            )
            self.duration(f"{where}.window.duration", w.get("duration"))
            self.duration(f"{where}.window.slide", w.get("slide"))
            window = Window(
                str(w.get("column", "")),
                str(w.get("duration", "")),
                str(w["slide"]) if w.get("slide") else None,
                str(w.get("as", "window")),
            )
        measures = spec.get("measures") or {}
        if not isinstance(measures, dict) or not measures:
            self.problem(
                f"{where}.measures",
                "expected a mapping of output column -> aggregate expression",
                "e.g. measures: {total: count(*), avg_x: avg(x)}",
            )
            measures = {}
        group_by = self.columns(f"{where}.group_by", spec.get("group_by"))
        if not group_by and window is None:
            self.problem(where, "an aggregation needs 'group_by' or 'window'", "add group_by: [column, ...]")
        return Aggregate(group_by, tuple((str(k), str(v)) for k, v in measures.items()), window)

    def trigger(self, where: str, raw: Any) -> Trigger:
        if isinstance(raw, str) and raw in ("availableNow", "once"):
            return Trigger(raw)
        if isinstance(raw, dict) and set(raw) == {"processingTime"}:
            self.duration(f"{where}.processingTime", raw["processingTime"])
            return Trigger("processingTime", str(raw["processingTime"]))
        self.problem(
            where, f"{raw!r} is not a trigger", "use availableNow (default), once, or {processingTime: '1 minute'}"
        )
        return Trigger()

    def streaming_rules(self, where: str, table: Table) -> None:
        """Reject what Structured Streaming would only reject at run time (or never, silently)."""
        agg, mark = table.aggregate, table.watermark
        if table.output_mode == "complete" and table.stateful:
            self.problem(
                f"{where}.output_mode",
                "a stateful function emits its rows itself, so Spark cannot rewrite "
                "its whole result every batch (complete mode)",
                "use output_mode: append (each row written once) or update (rows MERGEd on keys)",
            )
        elif table.output_mode == "complete" and not agg:
            self.problem(
                f"{where}.output_mode",
                "complete mode needs an aggregation",
                "add an 'aggregate:' block, or use output_mode: append",
            )
        if table.output_mode == "append" and agg:
            if not mark:
                self.problem(
                    f"{where}.aggregate",
                    "an append-mode aggregation needs a watermark (rows are emitted only once their window is final)",
                    "add 'watermark: {column: ..., delay: ...}' or use output_mode: complete",
                )
            elif agg.window and agg.window.column != mark.column:
                self.problem(
                    f"{where}.aggregate.window.column",
                    f"append mode emits a window once the watermark "
                    f"passes its end, but the window is on {agg.window.column!r} and the watermark on "
                    f"{mark.column!r}",
                    f"window on {mark.column} (or put the watermark on {agg.window.column})",
                )
            elif not agg.window and mark.column not in agg.group_by:
                self.problem(
                    f"{where}.aggregate",
                    f"append mode must group by the watermark column {mark.column!r} (or a window on it)",
                    f"add window: {{column: {mark.column}, duration: ...}}",
                )
        if table.output_mode == "update":
            self.update_rules(where, table)
        if agg and agg.window:
            self.window_rules(f"{where}.aggregate.window", agg.window)
        if table.dedup_keys and not mark:
            self.problem(
                f"{where}.dedup",
                "deduplication without a watermark keeps every key in state forever",
                "add 'watermark: {column: <event time>, delay: ...}'",
            )
        if table.order_by and not (agg and table.output_mode == "complete"):
            self.problem(
                f"{where}.order_by",
                "sorting a stream is only supported after an aggregation in complete mode",
                "drop order_by (sort when you read the table) or aggregate in complete mode",
            )
        sql = table.transform.sql if table.transform else None
        if sql and _ORDER_BY.search(sql):
            self.problem(
                f"{where}.transform.sql",
                "ORDER BY on a stream is not supported (nor window functions)",
                "remove ORDER BY; sort when you read the table, or use order_by after a complete-mode aggregation",
            )
        if table.reads_source and table.is_stateful:
            self.problem(
                where,
                "a table reading landing files or Kafka ingests them as they are (with quarantine)",
                "deduplicate or aggregate in a downstream table that reads this one",
            )
        if table.reads_source and table.layer != "bronze":
            self.problem(
                f"{where}.from", "only bronze tables read landing files or Kafka", "read the source in a bronze table"
            )

    def update_rules(self, where: str, table: Table) -> None:
        """Update mode MERGEs each batch on the table's keys: they must identify exactly one aggregate row."""
        if table.stateful:
            self.stateful_update_rules(where, table)
            return
        if not table.aggregate:
            if not table.dedup_keys:
                self.problem(
                    f"{where}.output_mode",
                    "update mode rewrites aggregate rows in place, and this table "
                    "has no aggregate (nor dedup): every row it writes is new",
                    "use output_mode: append",
                )
            return  # dedup: each surviving row is emitted once, exactly as in append mode
        expected = ", ".join(table.aggregate_keys)
        if not table.keys:
            self.problem(
                f"{where}.keys",
                "update mode MERGEs each batch into the table on its keys, and none are given",
                f"add keys: [{expected}] (the window alias, then group_by)",
            )
        elif sorted(table.keys) != sorted(table.aggregate_keys):
            self.problem(
                f"{where}.keys",
                f"update mode MERGEs on the keys, which must identify one aggregate row: "
                f"[{', '.join(table.keys)}] is not the window alias plus group_by",
                f"set keys: [{expected}]",
            )
        if table.expectations:
            self.problem(
                f"{where}.expectations",
                "a gate cannot set rows of an update-mode table aside: each row is "
                "the latest value of its key, so holding one back would leave the key's stale value in the "
                "table",
                "gate the upstream table, or use output_mode: append or complete",
            )

    def stateful_update_rules(self, where: str, table: Table) -> None:
        """A stateful function in update mode: its rows are MERGEd on `keys`, which must be columns it outputs."""
        columns = table.stateful.output_columns if table.stateful else ()
        if not table.keys:
            self.problem(
                f"{where}.keys",
                "update mode MERGEs each batch into the table on its keys, and none are given",
                f"add keys: [...] naming output_schema columns ({', '.join(columns)})",
            )
        missing = [key for key in table.keys if key not in columns]
        if missing:
            self.problem(
                f"{where}.keys",
                f"{', '.join(missing)} not in the stateful function's output_schema",
                f"use columns of output_schema: {', '.join(columns)}",
            )
        if table.expectations:
            self.problem(
                f"{where}.expectations",
                "a gate cannot set rows of an update-mode table aside: each row is "
                "the latest value of its key, so holding one back would leave the key's stale value in the "
                "table",
                "gate the upstream table, or use output_mode: append",
            )

    def window_rules(self, where: str, window: Window) -> None:
        duration, slide = duration_seconds(window.duration), duration_seconds(window.slide)
        if duration and slide and slide > duration:
            self.problem(
                f"{where}.slide",
                f"slide {window.slide!r} is longer than the window duration "
                f"{window.duration!r}: rows between two windows would belong to none",
                "use a slide no longer than the duration (slide = duration, or no slide, is tumbling)",
            )

    def join_upstream_rules(self, sources: dict[str, Source], tables: dict[str, Table], table: Table) -> None:
        """A join's `with` is another table of this pipeline, read as a Delta stream."""
        other = table.join.with_table if table.join else ""
        where = f"tables.{table.id}.join.with"
        if not other:
            return
        if other in sources or other.startswith(LANDING + "."):
            bronze = f"bronze.{other.split('.', 1)[1]}"
            self.problem(
                where,
                f"{other} is a landing source, and a join reads tables as Delta streams",
                f"join the bronze table that ingests it ({bronze}: from: {other})",
            )
        elif other == table.id:
            self.problem(where, "a table cannot join itself", "join an upstream table")
        elif other not in tables:
            others = ", ".join(t for t in tables if t != table.id)
            self.problem(where, f"unknown table {other!r}", f"join one of: {others}")
        elif tables[other].sink.is_file:
            self.problem(
                where,
                f"{other} writes {tables[other].sink.format} files, and a join reads tables as Delta streams",
                f"join {tables[other].source} instead, or drop {other}'s 'sink:'",
            )

    def dependency_order(self, sources: dict[str, Source], tables: dict[str, Table]) -> dict[str, Table]:
        for table in tables.values():
            self.join_upstream_rules(sources, tables, table)
            self.lookup_upstream_rules(sources, tables, table)
            source = sources.get(table.source)
            if isinstance(source, FileSource) and source.static:
                self.problem(
                    f"tables.{table.id}.from",
                    f"{table.source} is a static source (a dimension, read whole each run), not a stream",
                    f"read a streaming source, and look {table.source} up with "
                    f"'lookup: {{with: {table.source}, using: [...]}}'",
                )
            known = table.source in sources or table.source in tables
            if table.source and not known:
                names = ", ".join([*sources, *tables])
                self.problem(
                    f"tables.{table.id}.from", f"unknown source or table {table.source!r}", f"read one of: {names}"
                )
            if table.source == table.id:
                self.problem(f"tables.{table.id}.from", "a table cannot read itself", "read an upstream table")
            upstream = tables.get(table.source)
            if upstream is not None and not upstream.sink.is_delta and upstream is not table:
                what = (
                    f"sends its rows to Kafka topic {upstream.sink.topic}"
                    if upstream.sink.is_kafka
                    else f"writes {upstream.sink.format} files"
                )
                self.problem(
                    f"tables.{table.id}.from",
                    f"{table.source} {what}, and tables read their upstream as a Delta stream",
                    f"read {upstream.source} instead (the table {table.source} reads), or "
                    f"drop {table.source}'s 'sink:'",
                )
        ordered: dict[str, Table] = {}
        visiting: list[str] = []

        def visit(table_id: str) -> None:
            if table_id in ordered or table_id not in tables:
                return
            if table_id in visiting:
                cycle = " -> ".join([*visiting[visiting.index(table_id) :], table_id])
                self.problem(f"tables.{table_id}.from", f"tables form a cycle: {cycle}", "make one table read upstream")
                return
            visiting.append(table_id)
            for upstream in tables[table_id].upstreams:
                visit(upstream)
            visiting.pop()
            ordered[table_id] = tables[table_id]

        for table_id in tables:
            visit(table_id)
        return ordered


def resolve_setting(text: str) -> str:
    """A spec value with `${NAME}` replaced by the environment variable (checked by `environment_problems`)."""
    match = _ENV_REF.match(text.strip())
    return os.environ.get(match.group(1), "").strip() if match else text


def environment_problems(pipeline: Pipeline, table_ids: list[str]) -> list[str]:
    """The Kafka addresses the selected tables need: `${NAME}` set and host:port, and a broker answering there;
    checked when a run starts (before Spark, before the lock).

    Not at load time: Airflow parses the spec where the broker's address may not be set, and a spec must not hard-code
    where a cluster lives.
    """
    problems = []
    for where, text in _kafka_settings(pipeline, table_ids).items():
        match = _ENV_REF.match(text)
        value = resolve_setting(text)
        if match and not value:
            problems.append(
                f"{pipeline.spec_path}: {where}: environment variable {match.group(1)} is not set. Fix: "
                f"export {match.group(1)}=host:port[,host:port] where the run starts"
            )
        elif match and not all(_HOST_PORT.match(server.strip()) for server in value.split(",")):
            problems.append(
                f"{pipeline.spec_path}: {where}: environment variable {match.group(1)}={value!r} is not "
                f"host:port[,host:port]. Fix: export {match.group(1)}=broker1:9092,broker2:9092"
            )
        elif value and not any(_accepts(server.strip()) for server in value.split(",")):
            # Spark's Kafka client would retry for minutes before failing with a timeout that names no setting.
            named = f" (from {match.group(1)})" if match else ""
            problems.append(
                f"{pipeline.spec_path}: {where}: no Kafka broker answers on {value}{named}. Fix: start "
                f"the broker (on this machine: make kafka-up) or point the setting at a running one"
            )
    return problems


def _kafka_settings(pipeline: Pipeline, table_ids: list[str]) -> dict[str, str]:
    """Each Kafka address the tables need: {spec field: its text as written (maybe `${NAME}`)}."""
    settings = []
    for table_id in table_ids:
        table = pipeline.tables[table_id]
        source = pipeline.sources.get(table.source)
        if isinstance(source, KafkaSource):
            settings.append((f"sources.{source.name}.bootstrap_servers", source.bootstrap_servers))
        if table.sink.is_kafka:
            settings.append((f"tables.{table.id}.sink.bootstrap_servers", table.sink.bootstrap_servers or ""))
    return dict(settings)


def unset_environment(pipeline: Pipeline) -> list[str]:
    """The `${NAME}` variables the pipeline's Kafka addresses name that are not set here (no network: DAG parsing)."""
    names = [
        match.group(1)
        for text in _kafka_settings(pipeline, list(pipeline.tables)).values()
        if (match := _ENV_REF.match(text.strip())) and not resolve_setting(text)
    ]
    return sorted(set(names))


def _accepts(server: str, timeout: float = 3.0) -> bool:
    """Whether host:port accepts a TCP connection (the cheapest sign a broker is there)."""
    import socket

    host, _, port = server.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def duration_seconds(text: str | None) -> int | None:
    """'10 minutes' -> 600; None for anything the duration check rejects (it reports that itself)."""
    match = _DURATION.match(str(text or "").strip())
    if not match:
        return None
    return int(str(text).split()[0]) * _UNIT_SECONDS[match.group(1)]


def signed_seconds(text: str | None) -> int | None:
    """'-10 minutes' -> -600; None for anything the time_range check rejects (it reports that itself)."""
    value = str(text or "").strip()
    if not _SIGNED_DURATION.match(value):
        return None
    return -duration_seconds(value[1:]) if value.startswith("-") else duration_seconds(value)  # type: ignore[operator]


def _ddl_parts(text: str) -> list[str]:
    """A DDL string's column definitions: split at commas outside <...> and (...)."""
    depth, start, columns = 0, 0, []
    for i, char in enumerate(text + ","):
        depth += char in "<(" and 1 or char in ">)" and -1 or 0
        if char == "," and depth == 0:
            columns.append(text[start:i].strip())
            start = i + 1
    return columns


def ddl_columns(text: str) -> tuple[str, ...]:
    """Column names of a DDL string ('a STRING, b BIGINT' -> ('a', 'b'))."""
    return tuple(part.split(None, 1)[0].strip("`") for part in _ddl_parts(text) if part.split())


_NOT_CALLABLE = (
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
    ast.JoinedStr,
    ast.ListComp,
    ast.DictComp,
    ast.SetComp,
)


def function_problems(reference: str, options: list[str]) -> list[tuple[str, str, str]]:
    """Why `module:function` cannot be called as function(key, rows, state, **options): (field, message, fix).

    Read from the module's source with `ast`, never imported: validation runs user code no more than it starts a
    JVM. A name bound in a way the source cannot tell (an import, a call's result) is given the benefit of the doubt.
    """
    module, name = reference.split(":")
    found = _find_module(module)
    if found is None:
        return [("function", f"module {module!r} not found", "put transforms in spark_jobs/transforms/<module>.py")]
    origin = str(found.origin or "")
    if not origin.endswith(".py"):
        return []
    try:  # through the loader: under spark-submit the module sits in the --py-files zip, not in a folder
        get_source = getattr(found.loader, "get_source", None)
        source = get_source(found.name) if get_source else Path(origin).read_text()
        tree = ast.parse(source or "", origin)
    except (OSError, ImportError, SyntaxError, ValueError) as exc:
        return [("function", f"module {module!r} cannot be read ({type(exc).__name__}: {exc})", f"fix {origin}")]
    binding: Any = None
    for node in tree.body:  # the last top-level binding wins, as at import time
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            binding = node
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            binding = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            binding = node.value
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            binding = node
    if binding is None:
        return [
            (
                "function",
                f"{name!r} is not defined in module {module!r} ({origin})",
                f"define 'def {name}(key, rows, state, ...)' there, or fix the name",
            )
        ]
    if isinstance(binding, _NOT_CALLABLE):
        return [
            (
                "function",
                f"{module}.{name} is not callable (a {type(binding).__name__.lower()} value)",
                "point 'function' at a def taking (key, rows, state, **options)",
            )
        ]
    if not isinstance(binding, ast.FunctionDef):
        return []
    return _option_problems(binding, options)


def _option_problems(fn: ast.FunctionDef, options: list[str]) -> list[tuple[str, str, str]]:
    """The spec's options against the def's parameters after (key, rows, state)."""
    args = fn.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if len(positional) < 3 and not args.vararg:
        return [
            (
                "function",
                f"{fn.name}({', '.join(positional)}) does not take (key, rows, state)",
                f"define it as 'def {fn.name}(key, rows, state, ...)'",
            )
        ]
    first_default = len(positional) - len(args.defaults)
    accepted = positional[3:] + [a.arg for a in args.kwonlyargs]
    required = [p for i, p in enumerate(positional) if i >= 3 and i < first_default]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    problems = []
    if not args.kwarg:
        for option in options:
            if option not in accepted:
                problems.append(
                    (
                        f"options.{option}",
                        f"{fn.name} takes no parameter {option!r}",
                        f"use its parameters: {', '.join(accepted) or 'none'}",
                    )
                )
    for parameter in required:
        if parameter not in options:
            problems.append(
                ("options", f"{fn.name} needs the option {parameter!r}", f"add it: options: {{{parameter}: ...}}")
            )
    return problems


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def make_project_importable() -> None:
    """Put the project folder on sys.path: a spec names its transforms by module path inside the project (e.g.
    `spark_jobs.transforms.sessions:sessions`), whatever the working directory of the process reading it."""
    root = str(settings.project_root())
    if root not in sys.path:
        sys.path.append(root)


def _find_module(module: str) -> Any:
    make_project_importable()
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def validate_all(lake_root: Path | None = None) -> tuple[list[Pipeline], list[str]]:
    """Load every spec; also reject two pipelines that write the same table (they would share its path)."""
    pipelines, problems, owners = [], [], {}
    for path in all_spec_paths():
        try:
            pipeline = load_pipeline(path, lake_root)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        pipelines.append(pipeline)
        for table_id in pipeline.tables:
            if table_id in owners:
                problems.append(
                    f"{path}: tables.{table_id}: also written by pipeline {owners[table_id]!r}. "
                    "Fix: give one of them another table name"
                )
            owners[table_id] = pipeline.name
    return pipelines, problems
