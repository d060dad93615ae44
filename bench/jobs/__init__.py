"""The programs a benchmark starts as its own processes: history builder, plain Spark, DuckDB, empty app."""
