"""Parquet landing files: a record is a row. Parquet carries its own types, so nothing is malformed at the record
level; a row that lacks a field the spec declares NOT NULL is quarantined, its `_raw` the row as JSON.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from millpond.driver.file_formats.columns import ERROR, RAW, SOURCE_FILE, as_json, missing_required, nullable


def read(
    reader: Any, location: str | list[str], schema: StructType, options: dict[str, str], read_options: dict[str, str]
) -> DataFrame:
    """The records of the files at `location` (`reader` is `spark.readStream`, or `spark.read` for a reprocess)."""
    typed = reader.format("parquet").schema(nullable(schema)).options(**{**options, **read_options}).load(location)
    return typed.select(
        "*",
        F.col("_metadata.file_path").alias(SOURCE_FILE),
        as_json(schema).alias(RAW),
        missing_required(schema, F.col).alias(ERROR),
    )
