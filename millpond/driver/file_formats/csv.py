"""CSV landing files: a record is a data line after the header (Spark's CSV reader skips blank lines).

Read with Spark's CSV source, `header: 'true'` unless the spec's `options` say otherwise, PERMISSIVE: a line with
too few or too many fields, or a field of the wrong type, is kept whole in `_raw` with the reason in `_error`.
"""

from __future__ import annotations

import re
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from millpond.driver.file_formats.columns import CORRUPT, read_permissive, truncation_note


def read(
    reader: Any, location: str | list[str], schema: StructType, options: dict[str, str], read_options: dict[str, str]
) -> DataFrame:
    """The records of the files at `location` (`reader` is `spark.readStream`, or `spark.read` for a reprocess)."""
    csv_options = {"header": "true", **options}
    return read_permissive(
        reader, "csv", location, schema, {**csv_options, **read_options}, reason(schema, csv_options)
    )


def reason(schema: StructType, options: dict[str, str]) -> Column:
    """Why a CSV line was rejected: too few or too many fields (quoted separators not counted), or a field's type."""
    raw = F.col(CORRUPT)
    sep = options.get("sep", options.get("delimiter", ","))
    quote = options.get("quote", '"')
    unquoted = (
        F.regexp_replace(
            raw, f"{re.escape(quote)}(?:[^{re.escape(quote)}]|{re.escape(quote * 2)})*{re.escape(quote)}", ""
        )
        if quote
        else raw
    )
    count = F.size(F.split(unquoted, re.escape(sep)))
    expected = len(schema.fields)
    names = ", ".join(f.name for f in schema.fields)
    as_text = F.from_csv(
        raw,
        ", ".join(f"`{f.name}` STRING" for f in schema.fields),
        # None, not {}: over Spark Connect an empty dict becomes `map()`, typed MAP<VOID, VOID>, which from_csv refuses
        {k: v for k, v in options.items() if k not in ("header", "enforceSchema")} or None,
    )
    wrong_fields = [
        F.when(
            as_text.getField(f.name).isNotNull() & F.col(f"`{f.name}`").isNull(),
            F.concat(
                F.lit(f"field {f.name}: expected {f.dataType.simpleString()}, got "),
                F.substring(as_text.getField(f.name), 1, 60),
            ),
        )
        for f in schema.fields
    ]
    by_field = F.concat_ws("; ", *wrong_fields)
    prefix = "csv line does not match the schema: "
    reason = (
        F.when(
            count < expected,
            F.concat(
                F.lit(prefix + "too few fields ("), count.cast("string"), F.lit(f", expected {expected}: {names})")
            ),
        )
        .when(
            count > expected,
            F.concat(
                F.lit(prefix + "too many fields ("), count.cast("string"), F.lit(f", expected {expected}: {names})")
            ),
        )
        .when(by_field != "", F.concat(F.lit(prefix), by_field))
        .otherwise(F.lit(prefix + "unparseable line"))
    )
    return F.concat(reason, truncation_note(raw))
