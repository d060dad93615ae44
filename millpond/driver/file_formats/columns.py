"""The columns every landing read adds beside the source's schema, and the helpers each format's reader shares.

A landing read gives one row per record: the schema's columns, `_source_file` (the file it came from), `_raw` (the
record's text, kept for the quarantine) and `_error` (why the record is malformed; null for a well-formed one).
Bronze writes the well-formed rows and its quarantine the others, so bronze rows + quarantined rows == records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from millpond.spec.model import SOURCE_FILE_COLUMN as SOURCE_FILE

RAW, ERROR = "_raw", "_error"
# Where Spark's readers put a record they could not parse (their columnNameOfCorruptRecord).
CORRUPT = "_corrupt_record"
# Quarantined raw text is cut to this many characters (the reason then says so and gives the full length).
RAW_KEEP_CHARS = 64 * 1024


def nullable(schema: StructType) -> StructType:
    """The readers get every field nullable: a `NOT NULL` field's absence is a reason to quarantine, not a crash."""
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def as_json(schema: StructType) -> Column:
    """The raw text of a typed record that breaks a NOT NULL rule: the record as JSON."""
    return F.to_json(F.struct(*[F.col(f"`{f.name}`") for f in schema.fields]))


def kept_raw(raw: Column) -> Column:
    """What the quarantine keeps of a bad line: valid UTF-8 (bad bytes become U+FFFD), at most RAW_KEEP_CHARS."""
    return F.substring(F.make_valid_utf8(raw), 1, RAW_KEEP_CHARS)


def truncation_note(raw: Column) -> Column:
    length = F.length(F.make_valid_utf8(raw))
    note = F.concat(F.lit(f"; raw keeps the first {RAW_KEEP_CHARS} of "), length.cast("string"), F.lit(" characters"))
    return F.when(length > RAW_KEEP_CHARS, note).otherwise(F.lit(""))


def missing_required(schema: StructType, column: Callable[[str], Column]) -> Column:
    """`name TYPE NOT NULL` in the spec's schema: a record without that field (or with null) is quarantined."""
    missing = [
        F.when(column(f.name).isNull(), F.lit(f"field {f.name}: missing or null (declared NOT NULL)"))
        for f in schema.fields
        if not f.nullable
    ]
    if not missing:
        return F.lit(None).cast("string")
    reasons = F.concat_ws("; ", *missing)
    return F.when(reasons != "", reasons)


def read_permissive(
    reader: Any, fmt: str, location: str | list[str], schema: StructType, options: dict[str, str], reason: Column
) -> DataFrame:
    """Spark's own reader of `fmt` in PERMISSIVE mode, which keeps the text of a record it cannot read as the schema
    in CORRUPT: the records as every format returns them, `reason` (over CORRUPT and the fields) a bad one's
    `_error`."""
    records = (
        reader.format(fmt)
        .schema(nullable(schema).add(CORRUPT, "string"))
        .options(**options)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .load(location)
    )
    return records.select(
        *[F.col(f"`{f.name}`") for f in schema.fields],
        F.col("_metadata.file_path").alias(SOURCE_FILE),
        F.coalesce(kept_raw(F.col(CORRUPT)), as_json(schema)).alias(RAW),
        F.when(F.col(CORRUPT).isNotNull(), reason).otherwise(missing_required(schema, F.col)).alias(ERROR),
    )
