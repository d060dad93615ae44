"""XML landing files: a record is an element named by the spec's `rowTag` reader option (required), read with
Spark's own XML source, PERMISSIVE.

A record Spark's reader cannot read as the schema (a field of the wrong type, broken markup) is quarantined with
the first field that came out without a value named in `_error`; its `_raw` is the text Spark's reader keeps for it (in
Spark 4.2 the whole file's text, cut to the quarantine's limit). Broken markup can join records: an element left
open runs into the next, and the two are one quarantined record. A record without a field the spec declares NOT NULL
is quarantined too, its `_raw` the record as JSON.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from millpond.driver.file_formats.columns import CORRUPT, read_permissive, truncation_note


def read(
    reader: Any, location: str | list[str], schema: StructType, options: dict[str, str], read_options: dict[str, str]
) -> DataFrame:
    """The records of the files at `location` (`reader` is `spark.readStream`, or `spark.read` for a reprocess)."""
    return read_permissive(reader, "xml", location, schema, {**options, **read_options}, reason(schema))


def reason(schema: StructType) -> Column:
    """Why Spark's reader could not read a record: it stops at a value it cannot read as the field's type and leaves
    that field and the rest without one, so the first field without a value (in the schema's order) is named."""
    first = F.coalesce(*[F.when(F.col(f"`{f.name}`").isNull(), F.lit(f.name)) for f in schema.fields])
    prefix = "xml record does not match the schema or its markup is broken"
    return F.concat(
        F.lit(prefix),
        F.when(first.isNotNull(), F.concat(F.lit(" (first field without a value: "), first, F.lit(")"))).otherwise(
            F.lit("")
        ),
        truncation_note(F.col(CORRUPT)),
    )
