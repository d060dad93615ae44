"""A user-style transform module referenced by `module:function` in tests."""

from pyspark.sql import DataFrame


def only_walks(df: DataFrame) -> DataFrame:
    return df.where(df.gt == "walk")
