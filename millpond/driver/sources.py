"""Streaming reads: landing folders (parsed, malformed lines kept for quarantine) and upstream Delta tables; and
the one batch read, a lookup's dimension.

What one landed record is, so that bronze rows + quarantined rows == records:
- json: a line as Spark's text source splits a file (at `\\n`, `\\r\\n` or a lone `\\r`; NUL, `\\x0b`, `\\x0c`,
  `\\x1c`-`\\x1e`, `\\x85`, `\\u2028`, `\\u2029` do NOT end a line, unlike Python's `str.splitlines`), except blank
  lines (empty, or only spaces and tabs), which are skipped. An empty file holds no record.
- csv: a data line after the header (the CSV reader skips blank lines). parquet: a row.
- kafka: a message whose value is not null and not blank; its value is parsed like a json line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from millpond.driver import file_formats
from millpond.driver.file_formats.columns import (
    CORRUPT,
    ERROR,
    RAW,
    SOURCE_FILE,
    kept_raw,
    missing_required,
    nullable,
    truncation_note,
)
from millpond.driver.speedups import JSON_FUNCTIONS
from millpond.lake import checkpoints, paths, storage
from millpond.lake.delta_log import CHANGE_FEED_PROPERTY, change_feed_on
from millpond.lake.delta_log import latest_version as delta_version
from millpond.lake.paths import LakePath
from millpond.spec import (
    GLOB_CHARACTERS,
    FileSource,
    KafkaSource,
    Pipeline,
    Table,
    ddl_columns,
    resolve_setting,
)
from millpond.spec.model import KAFKA_COLUMNS
from millpond.spec.model import RESCUED_COLUMN as RESCUED

# json sources only: the names of a line's fields that the schema does not name (used by the writer for `add` and
# `fail`, never written); the fields themselves are bronze's `_rescued_data` (RESCUED) under `rescue`.
NEW_FIELDS = "_new_fields"
# json sources only: a hash bucket of the line's text. Bronze's writer collects the buckets (and files) of bad lines
# while it writes the good ones, so its quarantine pass parses only the lines in those buckets (reread_bad_lines:
# the filter on the raw text runs before the parse), not the whole batch again (B3).
LINE_BUCKET, LINE_BUCKETS = "_line_bucket", 65536
# The standard path's (MILLPOND_JSON_FUNCTIONS=off) parse of a line as map<string,variant>: its new fields' source.
_FIELDS = "_fields"
# The file source silently skips files whose mtime is older than maxFileAge (default 7 days) relative to the
# newest file seen: a late file copied with its original mtime would be lost. Ten years is "never".
_MAX_FILE_AGE = "3650d"
# A json line longer than this is quarantined unparsed ("line too long"): a record that size is a producer bug,
# and carrying it into bronze, silver and the quality reports costs memory at every step.
MAX_LINE_BYTES = 1024 * 1024
# New json fields that can become bronze columns under `schema_drift: add`; any other name is rescued instead.
ADDABLE_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # `_name` is millpond's (`_ingested_at`, ...)
# Files per batch that a complete-mode table's first batch reads: all of them (Delta's largest; its default is 1,000).
WHOLE_SNAPSHOT_FILES = 2**31 - 1


def read_table_source(spark: SparkSession, pipeline: Pipeline, table: Table) -> DataFrame:
    if table.reads_landing:
        landing = pipeline.sources[table.source]
        assert isinstance(landing, FileSource)  # the spec loader keys landing sources `landing.<name>`
        return read_landing(spark, landing)
    if table.reads_kafka:
        kafka = pipeline.sources[table.source]
        assert isinstance(kafka, KafkaSource)  # and Kafka sources `kafka.<name>`
        return read_kafka(spark, kafka)
    return read_delta_stream(spark, table, table.source, pipeline)


def read_join_source(spark: SparkSession, pipeline: Pipeline, table: Table) -> DataFrame | None:
    """The `with` side of a join table (None without a join): a Delta stream, under the table's rate limit too, and
    read as the `from` side is (read_delta_stream), so a commit that removes rows stops neither side."""
    return read_delta_stream(spark, table, table.join.with_table, pipeline) if table.join else None


class DimensionProblem(RuntimeError):
    """A lookup's dimension cannot be read as it is (missing, empty, duplicate keys): the run stops, naming the fix."""


def read_dimension(spark: SparkSession, pipeline: Pipeline, table: Table) -> DataFrame | None:
    """A lookup's static side, read whole (batch) when the run starts; None without a lookup.

    Checked before the query starts, because Spark would not complain: a missing folder would make an inner lookup
    drop every row and a left_outer one write nulls, and a key listed twice would duplicate the stream rows it
    matches. A malformed csv/json line fails the read (FAILFAST) instead of becoming a row of nulls.
    """
    if not table.lookup:
        return None
    source = pipeline.sources[table.lookup.dimension]
    assert isinstance(source, FileSource) and source.static
    folder = paths.landing_path(source.path)
    fix = (
        f"Fix: put the dimension's {source.format} data at {folder} (sources.{source.name}.path in "
        f"{pipeline.spec_path}), then rerun; nothing of {table.id} was read or written"
    )
    if source.format == "delta":
        if not (folder / "_delta_log").is_dir():
            raise DimensionProblem(f"dimension {source.id}: no Delta table at {folder}. {fix}")
        df = spark.read.format("delta").options(**source.options).load(str(folder))
        if source.schema:
            df = df.select(*[F.col(f"`{c}`") for c in ddl_columns(source.schema)])
    else:
        if not _has_data_files(folder):
            raise DimensionProblem(
                f"dimension {source.id}: no {source.format} file at {folder} (files whose names "
                f"start with '.' or '_' are skipped). {fix}"
            )
        options = {"mode": "FAILFAST", **source.options}
        df = spark.read.format(source.format).schema(source.schema).options(**options).load(str(folder))
    keys = list(table.lookup.using)
    repeated = df.groupBy(*keys).count().where(F.col("count") > 1).limit(3).collect()
    if repeated:
        shown = "; ".join(", ".join(f"{k}={r[k]!r}" for k in keys) + f" ({r['count']} rows)" for r in repeated)
        raise DimensionProblem(
            f"dimension {source.id} at {folder} holds a key more than once ({shown}): each "
            f"matching row of {table.id} would be written once per dimension row. Fix: keep one "
            f"row per {', '.join(keys)} in the dimension, then rerun"
        )
    return df


def _has_data_files(folder: LakePath) -> bool:
    """A file Spark's reader would read: not hidden, at any depth (a folder of partitions counts)."""
    if folder.is_file():
        return not storage.hidden(folder.name)
    return bool(storage.listing(folder)) if folder.is_dir() else False


def schema_of(ddl: str) -> StructType:
    """A spec schema (a DDL column list) as Spark reads it: a struct, though pyspark types `fromDDL` as any type."""
    return cast(StructType, StructType.fromDDL(ddl))


def read_delta_stream(spark: SparkSession, table: Table, upstream: str, pipeline: Pipeline) -> DataFrame:
    """An upstream table's new rows (an append table's with `skipChangeCommits`: Pipeline.skips_change_commits),
    or its change data feed's new changes where the table applies that feed (Table.reads_change_feed).

    A complete-mode table on a new checkpoint (its first run, a full refresh, a reprocess's rebuild) reads the whole
    upstream in one batch, whatever its rate limit and Delta's default of 1,000 files per batch: each batch
    overwrites the table, so a rebuild in several would show readers partial totals until its last one, and keep
    them if it stopped part-way.

    A change feed's reader reads all that is new in one batch too: Delta admits a commit that records change files
    whole, but derives the changes of one that does not (an overwrite, an append, a whole-file delete) from its added
    and removed files, admitted file by file, and a key's delete and insert of one commit must meet in one batch
    (millpond.driver.sinks.cdc.net_changes)."""
    options = table.rate_limit.reader_options()
    rebuilds = table.output_mode == "complete" and not checkpoints.has_batches(pipeline, table)
    if rebuilds or table.reads_change_feed(upstream):  # a feed: whole commits (below); its loader refuses a limit
        options = {"maxFilesPerTrigger": str(WHOLE_SNAPSHOT_FILES)}
    reader = spark.readStream.format("delta").options(**options)
    location = str(paths.upstream_path(pipeline, upstream))
    if table.reads_change_feed(upstream):
        # every change: an update's old row tells a key the update changed (millpond.driver.sinks.cdc.net_changes)
        return reader.option("readChangeFeed", "true").load(location)
    if pipeline.skips_change_commits(table, upstream):
        reader = reader.option("skipChangeCommits", "true")
    return reader.load(location)


class ChangeFeedOff(RuntimeError):
    """A Delta source's owner has not turned its change data feed on: the run stops before reading, naming the fix."""


def enable_change_feed_upstream(spark: SparkSession, pipeline: Pipeline, table: Table) -> None:
    """Turn on Delta's change data feed on the upstream a table reads it from, if it is off, before the table's
    query starts. A new stream of the feed reads the upstream's current rows first (as inserts, at the version it
    starts at), then each later commit's changes, which Delta records only while the property is on: set here,
    it is on for every commit the stream reads after that first snapshot. One commit, once per upstream table
    (again after a full refresh recreates it); read from the log first, so a run whose upstream has it asks Spark
    nothing. A table that does not exist yet is left for the run that finds it.

    A Delta source is another job's table: millpond never alters it, and stops the run while its feed is off."""
    upstream = paths.upstream_path(pipeline, table.source)
    if not table.reads_change_feed(table.source) or delta_version(upstream) < 0:
        return
    feed_on = change_feed_on(upstream)
    if feed_on or (feed_on is None and table.reads_delta_source):  # unknown: Spark's read says, if it is off
        return
    if table.reads_delta_source:
        raise ChangeFeedOff(
            f"{table.source} at {upstream} has its change data feed off, so Delta keeps no changes of its "
            f"commits, and millpond never alters a table another job writes. Fix: its owner runs ALTER TABLE "
            f"delta.`{upstream}` SET TBLPROPERTIES ('{CHANGE_FEED_PROPERTY}' = 'true') (or creates it with that "
            f"property), then rerun; nothing of {table.id} was read or written"
        )
    location = "delta.`" + str(upstream).replace("`", "``") + "`"
    spark.sql(f"ALTER TABLE {location} SET TBLPROPERTIES ('{CHANGE_FEED_PROPERTY}' = 'true')")


def read_landing(spark: SparkSession, source: FileSource, files: list[str] | None = None) -> DataFrame:
    """New files of a landing folder, one row per record, with `_source_file`, `_raw` and `_error`.

    Files whose names start with `.` or `_` are skipped by Spark's file source: writers land a file under a
    hidden temporary name and rename it when complete, so a half-written file is never read. With `files` (paths
    Spark's file source logged), those files are read in batch with the same parse: what a reprocess reads again.
    """
    schema = schema_of(source.schema)
    options: dict[str, str] = {"maxFileAge": _MAX_FILE_AGE, **source.rate_limit.reader_options()}
    location: str | list[str] = str(paths.landing_path(source.path))
    reader: Any = spark.readStream
    if files is not None:
        reader, location, options = spark.read, files, {}
    if source.format == "json":
        lines = reader.format("text").options(**options).load(location)
        return parse_json_lines(
            lines.select("value", F.col("_metadata.file_path").alias(SOURCE_FILE)), schema, source.options
        )
    return file_formats.read(source, schema, reader, location, options)


def read_kafka(spark: SparkSession, source: KafkaSource) -> DataFrame:
    """New messages of the subscribed topics, parsed like landing json lines, with where each came from.

    Spark's Kafka source logs each micro-batch's offset range in the checkpoint before the batch runs, so a replay
    reads the same messages (while Kafka retains them: a gap fails the query, Spark's `failOnDataLoss`).
    `_source_file` is `kafka:<topic>/<partition>/<offset>`, the message's address, for the quarantine's
    `source_file`; bronze keeps the `_kafka_*` columns instead.
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", resolve_setting(source.bootstrap_servers))
        .option("subscribe", ",".join(source.topics))
        .option("startingOffsets", source.starting_offsets)
        .options(**source.rate_limit.reader_options(), **source.options)
    )
    messages = reader.load().select(
        F.col("value").cast("string").alias("value"),
        F.concat_ws("/", F.concat(F.lit("kafka:"), F.col("topic")), F.col("partition"), F.col("offset")).alias(
            SOURCE_FILE
        ),
        *[
            value.alias(name)
            for name, value in zip(
                KAFKA_COLUMNS,
                (F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp"), F.col("key").cast("string")),
                strict=True,
            )
        ],
    )
    return parse_json_lines(messages, schema_of(source.schema), carry=KAFKA_COLUMNS)


def parse_json_lines(
    lines: DataFrame, schema: StructType, options: Mapping[str, str] | None = None, carry: tuple[str, ...] = ()
) -> DataFrame:
    """Parse NDJSON rows (`value`, `_source_file`) against the schema; blank lines dropped, bad ones get a reason.

    A line is parsed only if it is valid UTF-8 and at most MAX_LINE_BYTES long; otherwise it is quarantined with
    that reason. Fields the schema does not name end up in `_rescued_data` (JSON) and `_new_fields` (names).
    `carry` names further columns of `lines` kept as they are (a Kafka message's topic, partition, offset, ...).
    """
    fast = JSON_FUNCTIONS.enabled()
    value = F.col("value")
    readable = (F.octet_length(value) <= MAX_LINE_BYTES) & F.is_valid_utf8(value)
    parse_options = _parse_options(options or {})
    # `text` is null for an unreadable line, so nothing below parses 10 MB of it (Spark may evaluate a CASE
    # branch it does not take when it shares a subexpression).
    text = F.col("text")
    # A line starting with `{` is not blank: only the others pay for the trimmed copy.
    not_blank = F.when(value.startswith("{"), F.lit(True)).otherwise(F.btrim(value, F.lit(" \t")) != "")
    parsed = (
        lines.where(not_blank)
        .select(value, F.col(SOURCE_FILE), *carry, F.when(readable, value).alias("text"))
        .select(
            value,
            text,
            F.col(SOURCE_FILE),
            *carry,
            # explode of a one-element array: a barrier that keeps filters on the parse's results (the writer's
            # good/bad split) above the parse. Spark would otherwise push them below it, inlining the parse into
            # the filter once per reference (B3: the quarantine pass cost a third of the batch's parse).
            F.explode(
                F.array(
                    parse_json_line(
                        text, nullable(schema).add(CORRUPT, "string"), parse_options, lines.sparkSession, fast
                    )
                )
            ).alias("j"),
            *([] if fast else [F.from_json(text, "map<string,variant>", parse_options).alias(_FIELDS)]),
        )
        .withColumn(NEW_FIELDS, _new_fields(schema, parse_options, fast))
    )
    malformed = F.col("j").getField(CORRUPT).isNotNull() | F.col("j").isNull()
    missing = missing_required(schema, F.col("j").getField)
    # The same test as `_error IS NOT NULL` (a malformed line's reason is never null), without the reason: Spark
    # inlines a column's expression wherever it is used, and the four columns below repeated the reason's per-field
    # JSON lookups (B3: bronze's writer 3.76 against 4.05 s warm, bench/parse_cost.py).
    bad = malformed | missing.isNotNull()
    unknown = F.col(NEW_FIELDS)
    has_new = unknown.isNotNull()
    rescued = json_fields(text, unknown, parse_options, fast)
    return parsed.select(
        *[F.col("j").getField(f.name).alias(f.name) for f in schema.fields],
        SOURCE_FILE,
        *carry,
        # Good rows keep their text only when it has new fields (`schema_drift: add` reads them from it).
        F.when(~bad, F.when(has_new, value)).otherwise(kept_raw(value)).alias(RAW),
        F.when(malformed, _json_reason(schema)).otherwise(missing).alias(ERROR),
        F.when(~bad & has_new, rescued).alias(RESCUED),
        F.when(~bad & has_new, unknown).alias(NEW_FIELDS),
        F.when(bad, _line_bucket(value)).alias(LINE_BUCKET),  # only bad lines' buckets are used
    )


def _parse_options(options: Mapping[str, str]) -> dict[str, str]:
    """A json source's options as every read of its lines uses them: PERMISSIVE, so a bad line is a corrupt record."""
    return {**options, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def _json_options(source: FileSource | KafkaSource) -> dict[str, str]:
    """The options a source's json lines are parsed with (a Kafka source's values take Spark's defaults)."""
    return _parse_options(source.options if isinstance(source, FileSource) else {})


def reread_bad_lines(spark: SparkSession, source: FileSource, files: list[str], buckets: list[int]) -> DataFrame:
    """The bad lines of a json landing batch, read again for the quarantine: the same columns as the stream's rows.

    `files` and `buckets` are the batch's `_source_file` and `_line_bucket` values of bad lines. Only those files
    are listed and read (same text source: the same lines as the stream read), and the bucket filter runs on the
    raw text before the parse, so only about 2 % of a file's lines with 0.1 % bad lines are parsed again.
    """
    lines = (
        spark.read.format("text")
        .load(_paths_to_read(source, files))
        .where(F.col("_metadata.file_path").isin(files))
        .select("value", F.col("_metadata.file_path").alias(SOURCE_FILE))
        .where(_line_bucket(F.col("value")).isin(buckets))
    )
    parsed = parse_json_lines(lines, schema_of(source.schema), source.options)
    return parsed.where(F.col(ERROR).isNotNull())


def _paths_to_read(source: FileSource, files: list[str]) -> str | list[str]:
    """The files themselves (their `_metadata.file_path` URIs decoded), so Spark lists them and not the whole landing
    folder, which grows with every landed file. Other stores, and names Spark would read as glob patterns, fall back to
    the folder (the `isin` filter keeps the same lines either way). A file gone since is left out: the count check
    after this read then names it, instead of Spark's PATH_NOT_FOUND."""
    parsed = [urlparse(file) for file in files]
    local = [unquote(url.path) for url in parsed]
    if any(url.scheme != "file" for url in parsed) or any(GLOB_CHARACTERS & set(path) for path in local):
        return str(paths.landing_path(source.path))
    return [path for path in local if os.path.exists(path)] or str(paths.landing_path(source.path))


def _line_bucket(value: Column) -> Column:
    return F.pmod(F.xxhash64(value), F.lit(LINE_BUCKETS))


def parse_json_line(
    text: Column, schema: StructType, options: dict[str, str], spark: SparkSession, fast: bool = True
) -> Column:
    """from_json(text, schema, options); with `fast` (MILLPOND_JSON_FUNCTIONS, the default) parsed from the line's
    UTF-8 bytes by jvm/ JsonLineParser, Spark's own parser, where from_json decodes every line through a Reader
    first. Same rows for valid UTF-8, the only lines bronze parses (tests/integration/speedups/test_json_functions.py compares
    the two paths on hostile lines; bench/parse_cost.py times both in bronze's writer)."""
    if not fast:
        return F.from_json(text, schema, options)
    return F.call_function("millpond_parse_json_line", text, F.lit(schema.json()), _options_map(spark, options))


def _options_map(spark: SparkSession | None, options: dict[str, str]) -> Column:
    """The parse options as a map literal for millpond's functions, with the session's time zone as from_json adds it."""
    settings = {"timeZone": spark.conf.get("spark.sql.session.timeZone"), **options} if spark else dict(options)
    return F.create_map(*[F.lit(part) for key, value in settings.items() for part in (key, value)])


def json_fields(text: Column, names: Column, options: dict[str, str], fast: bool = True) -> Column:
    """The line's top-level fields named in `names` as one JSON object (`_rescued_data`), read with the parse's
    options. Fast: jvm/ JsonLineFields, each value compact with its numbers' text kept. Standard:
    `to_json(map_filter(from_json(.., 'map<string,variant>'), ..))`, which whole-stage codegen cannot compile, so its
    projection runs outside the stage for every line (bench/parse_cost.py). Both name the same fields with the same
    values; a number's text may differ (1.50 against 1.5), and a repeated key's last value is the one JSON readers
    take in both."""
    if not fast:
        fields = F.from_json(text, "map<string,variant>", options)
        return F.to_json(F.map_filter(fields, lambda key, _: F.array_contains(names, key)))
    return F.call_function("millpond_json_fields", text, names, _options_map(None, options))


def _new_fields(schema: StructType, options: dict[str, str], fast: bool = True) -> Column:
    """The line's top-level keys that are not schema fields, as the parse reads keys, or null when there are none.
    Fast: one tokenizing pass that skips values (jvm/ JsonLineKeys). Standard: the keys of from_json's
    map<string,variant> (a second full parse of every line)."""
    names = F.array(*[F.lit(f.name) for f in schema.fields])
    if not fast:
        unknown = F.array_except(F.map_keys(F.col(_FIELDS)), names)
        return F.when(F.size(unknown) > 0, unknown)
    return F.call_function("millpond_unknown_json_keys", F.col("text"), names, _options_map(None, options))


def _json_reason(schema: StructType) -> Column:
    """Why a line was rejected, naming the field where one is to blame. Only evaluated for bad lines."""
    value, text = F.col("value"), F.col("text")
    wrong_fields = [
        F.when(
            F.get_json_object(text, f"$['{f.name}']").isNotNull() & F.col("j").getField(f.name).isNull(),
            F.concat(
                F.lit(f"field {f.name}: expected {f.dataType.simpleString()}, got "),
                F.substring(F.get_json_object(text, f"$['{f.name}']"), 1, 60),
            ),
        )
        for f in schema.fields
    ]
    by_field = F.concat_ws("; ", *wrong_fields)
    reason = (
        F.when(
            F.octet_length(value) > MAX_LINE_BYTES,
            F.concat(
                F.lit("line too long: "),
                F.octet_length(value).cast("string"),
                F.lit(f" bytes (limit {MAX_LINE_BYTES}), not parsed"),
            ),
        )
        .when(~F.is_valid_utf8(value), F.lit("invalid UTF-8 bytes (shown as U+FFFD in raw)"))
        .when(~F.ltrim(text).startswith("{"), F.lit("not a JSON object"))
        .when(F.get_json_object(text, "$").isNull(), F.lit("malformed JSON (truncated or invalid syntax)"))
        .when(by_field != "", by_field)
        .otherwise(F.lit("does not match the schema"))
    )
    return F.concat(reason, truncation_note(value))


class SchemaDriftFailed(RuntimeError):
    """`schema_drift: fail` met a well-formed record with fields the source's schema does not name."""


def apply_schema_drift(
    good: DataFrame, source: FileSource | KafkaSource, spec_path: str, table_columns: list[str]
) -> DataFrame:
    """The well-formed rows of a parsed json batch shaped by the source's drift policy, `_new_fields` dropped.

    rescue: `_rescued_data` as parsed. add: each new field named like an identifier that is not a column yet
    (Delta names are case-insensitive), or that an earlier batch added, becomes a STRING column holding the
    field's text (a JSON string unquoted, anything else as JSON); other new fields stay in `_rescued_data`.
    STRING because one batch's values cannot fix a type for every later file (87 now, 87.5 next hour, "n/a"
    tomorrow): cast downstream. fail: raise SchemaDriftFailed naming the source, each new field and its files,
    and the fix; nothing is written.
    """
    if NEW_FIELDS not in good.columns:
        return good
    if source.schema_drift == "rescue":
        return good.drop(NEW_FIELDS)
    found = (
        good.where(F.col(NEW_FIELDS).isNotNull())
        .select(F.explode(NEW_FIELDS).alias("field"), SOURCE_FILE)
        .groupBy("field")
        .agg(F.sort_array(F.collect_set(SOURCE_FILE)).alias("files"))
        .orderBy("field")
        .collect()
    )
    if not found:
        return good.drop(NEW_FIELDS)
    if source.schema_drift == "fail":
        raise SchemaDriftFailed(_drift_message(source, spec_path, found))
    options = _json_options(source)
    columns = {c.lower(): c for c in [*table_columns, *good.columns]}
    # A plain name that is no column yet, or exactly a column an earlier batch added; not a case variant of one.
    added = [
        r.field
        for r in found
        if ADDABLE_FIELD.match(r.field)
        and columns.get(r.field.lower(), r.field) == r.field
        and r.field not in good.columns
    ]
    left = F.array_except(F.col(NEW_FIELDS), F.array(*[F.lit(name) for name in added]))
    # Read as the parse read the line (single quotes, comments, ... per the source's options); map<string,string>
    # gives a JSON string's text unquoted and any other value as JSON.
    added_columns = []
    if added:
        as_text = F.from_json(F.col(RAW), "map<string,string>", options)
        added_columns = [as_text.getItem(name).alias(name) for name in added]
    return good.select(
        *[c for c in good.columns if c not in (RESCUED, NEW_FIELDS)],
        F.when(F.size(left) > 0, json_fields(F.col(RAW), left, options, JSON_FUNCTIONS.enabled())).alias(RESCUED),
        *added_columns,
    )


def _drift_message(source: FileSource | KafkaSource, spec_path: str, found: list) -> str:
    fields = []
    for row in found:
        files = ", ".join(row.files[:3]) + (f" and {len(row.files) - 3} more" if len(row.files) > 3 else "")
        fields.append(f"{row.field} (in {files})")
    names = ", ".join(row.field for row in found)
    return (
        f"schema drift in source {source.id}: new field(s) {'; '.join(fields)} not in its schema, and its policy is "
        f"schema_drift: fail, so nothing of this batch was written. Fix: add {names} to sources.{source.name}.schema "
        f"in {spec_path} (as 'name TYPE'), or set sources.{source.name}.schema_drift to rescue or add; then rerun: "
        "the same files are read again and ingested once"
    )
