"""Streaming reads: landing folders (parsed, malformed lines kept for quarantine) and upstream Delta tables."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from millpond import paths
from millpond.spec import FileSource, Pipeline, Table

# Columns a landing read adds next to the source's schema. `_error` is null for a well-formed line.
SOURCE_FILE, RAW, ERROR = "_source_file", "_raw", "_error"
_CORRUPT = "_corrupt_record"
# The file source silently skips files whose mtime is older than maxFileAge (default 7 days) relative to the
# newest file seen: a late file copied with its original mtime would be lost. Ten years is "never".
_MAX_FILE_AGE = "3650d"


def read_table_source(spark: SparkSession, pipeline: Pipeline, table: Table) -> DataFrame:
    if table.reads_landing:
        return read_landing(spark, pipeline.sources[table.source])
    reader = spark.readStream.format("delta").options(**table.rate_limit.reader_options())
    return reader.load(str(paths.table_path(table.source)))


def read_landing(spark: SparkSession, source: FileSource) -> DataFrame:
    """New files of a landing folder, one row per record, with `_source_file`, `_raw` and `_error`.

    Files whose names start with `.` or `_` are skipped by Spark's file source: writers land a file under a
    hidden temporary name and rename it when complete, so a half-written file is never read.
    """
    schema = StructType.fromDDL(source.schema)
    options = {"maxFileAge": _MAX_FILE_AGE, **source.rate_limit.reader_options()}
    location = str(paths.landing_path(source.path))
    if source.format == "json":
        lines = spark.readStream.format("text").options(**options).load(location)
        return parse_json_lines(lines.select("value", F.col("_metadata.file_path").alias(SOURCE_FILE)), schema,
                                source.options)  # fmt: skip
    if source.format == "csv":
        typed = StructType([*schema.fields]).add(_CORRUPT, "string")
        raw = (
            spark.readStream.format("csv").schema(typed)
            .options(**{"header": "true", **source.options, **options})
            .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT)
            .load(location)
        )  # fmt: skip
        return raw.select(
            *[F.col(f"`{f.name}`") for f in schema.fields],
            F.col("_metadata.file_path").alias(SOURCE_FILE),
            F.col(_CORRUPT).alias(RAW),
            F.when(F.col(_CORRUPT).isNotNull(), F.lit("csv line does not match the schema (field count or type)"))
            .alias(ERROR),
        )
    # parquet carries its own types: nothing can be malformed at the line level.
    typed_stream = spark.readStream.format("parquet").schema(schema).options(**options).load(location)
    return typed_stream.select(
        "*", F.col("_metadata.file_path").alias(SOURCE_FILE), F.lit(None).cast("string").alias(RAW),
        F.lit(None).cast("string").alias(ERROR),
    )  # fmt: skip


def parse_json_lines(lines: DataFrame, schema: StructType, options: dict[str, str] | None = None) -> DataFrame:
    """Parse NDJSON rows (`value`, `_source_file`) against the schema; blank lines dropped, bad ones get a reason."""
    value = F.col("value")
    parse_options = {**(options or {}), "mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = lines.where(F.trim(value) != "").select(
        value,
        F.col(SOURCE_FILE),
        F.from_json(value, StructType([*schema.fields]).add(_CORRUPT, "string"), parse_options).alias("j"),
    )
    return parsed.select(
        *[F.col("j").getField(f.name).alias(f.name) for f in schema.fields],
        SOURCE_FILE,
        value.alias(RAW),
        F.when(F.col("j").getField(_CORRUPT).isNotNull() | F.col("j").isNull(), _json_reason(schema)).alias(ERROR),
    )


def _json_reason(schema: StructType) -> Column:
    """Why a line was rejected, naming the field where one is to blame. Only evaluated for bad lines."""
    value = F.col("value")
    wrong_fields = [
        F.when(
            F.get_json_object(value, f"$['{f.name}']").isNotNull() & F.col("j").getField(f.name).isNull(),
            F.concat(F.lit(f"field {f.name}: expected {f.dataType.simpleString()}, got "),
                     F.substring(F.get_json_object(value, f"$['{f.name}']"), 1, 60)),
        )
        for f in schema.fields
    ]
    by_field = F.concat_ws("; ", *wrong_fields)
    return (
        F.when(~F.ltrim(value).startswith("{"), F.lit("not a JSON object"))
        .when(F.get_json_object(value, "$").isNull(), F.lit("malformed JSON (truncated or invalid syntax)"))
        .when(by_field != "", by_field)
        .otherwise(F.lit("does not match the schema"))
    )
