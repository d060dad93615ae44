"""A user-style transform module referenced by `module:function` in tests."""

from pyspark.sql import DataFrame


def only_walks(df: DataFrame) -> DataFrame:
    return df.where(df.gt == "walk")


def to_the_hour(df: DataFrame) -> DataFrame:
    """Rewrites the event time a reprocess slices by (truncates it to the hour): a reprocess must refuse."""
    from pyspark.sql import functions as F

    return df.withColumn("Recorded_At", F.date_trunc("hour", F.col("Recorded_At")))
