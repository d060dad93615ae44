"""Landing file formats other than json: one module per format, named as the spec names it (`format: csv` is
csv.py), each with one function

    read(reader, location, schema, options, read_options) -> DataFrame

that reads the files at `location` with `reader` (`spark.readStream`, or `spark.read` when a reprocess reads given
files again), the spec's reader `options` and the stream's `read_options` (rate limits, file age), and returns one
row per record: the schema's columns, then `_source_file`, `_raw` and `_error` (columns.py). A malformed record is
a row with a reason in `_error`, never a dropped one.

json is not here: its lines go through millpond's own parser (millpond.driver.sources.parse_json_lines), which
Kafka messages share, with the bad-line reread and schema drift only json has.

A new format is its module here and its name in millpond.spec.model.FILE_SOURCE_FORMATS (which `millpond validate`
checks specs against, before Spark starts); tests/unit/driver/test_file_formats.py holds the two to each other.
"""

from __future__ import annotations

import importlib
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from millpond.spec import FileSource


def read(
    source: FileSource, schema: StructType, reader: Any, location: str | list[str], read_options: dict[str, str]
) -> DataFrame:
    """The records of `source`'s files at `location`, read by its format's module."""
    module = importlib.import_module(f"{__name__}.{source.format}")
    records: DataFrame = module.read(reader, location, schema, dict(source.options), read_options)
    return records
