"""millpond: incremental lakehouse pipelines declared as specs, run by Spark Structured Streaming into Delta Lake."""

__version__ = "0.1.0"
