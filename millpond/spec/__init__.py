"""Pipeline specs: one YAML file per pipeline, loaded into frozen objects and validated before Spark starts.

Why YAML and not a Python module: a spec is data. Airflow parses it every 30 s, `millpond validate`
checks it without importing user code or starting a JVM, and reviewers read it in a pull request.
Python lives where it is needed: a table may name a `module:function` transform.

This package imports nothing heavy (no pyspark): DAG files and the CLI use it at parse time. Its modules:

    model        the frozen objects (Pipeline, Table, sources, sinks, joins, ...) and the words a spec may use
    errors       SpecError, carrying every problem of a spec at once
    syntax       how values are written: names, durations, Kafka addresses, Spark DDL
    loader/      YAML -> model, one module of functions per part of a spec
    user_code    the project's `module:function` references, checked with `ast`, never imported
    environment  `${NAME}` settings, resolved and checked when a run starts
    probe        whether a Kafka broker answers
    suites       expectation suites, read without GX

Everything other packages use is importable from here.
"""

from millpond.spec.environment import environment_problems, resolve_setting, unset_environment
from millpond.spec.errors import SpecError
from millpond.spec.loader import all_spec_paths, load_pipeline, spec_path_for, validate_all
from millpond.spec.model import (
    CDC_DELETED,
    CDC_SEQUENCE,
    CHANGE_FEED_COLUMNS,
    CHANGE_TYPE,
    COMMIT_VERSION,
    END_AT,
    GLOB_CHARACTERS,
    GLOB_SHOWN,
    LAYERS,
    START_AT,
    Aggregate,
    Cdc,
    DeltaSource,
    FileSource,
    Freshness,
    Join,
    KafkaSource,
    Lookup,
    Pipeline,
    RateLimit,
    Sink,
    Source,
    Stateful,
    Table,
    Transform,
    Trigger,
    Watermark,
    Window,
    normalize_table_id,
)
from millpond.spec.syntax import ddl_columns, duration_seconds, goal_seconds, signed_seconds
from millpond.spec.user_code import function_problems, make_project_importable

__all__ = [
    "CDC_DELETED",
    "CDC_SEQUENCE",
    "CHANGE_FEED_COLUMNS",
    "CHANGE_TYPE",
    "COMMIT_VERSION",
    "END_AT",
    "GLOB_CHARACTERS",
    "GLOB_SHOWN",
    "LAYERS",
    "START_AT",
    "Aggregate",
    "Cdc",
    "DeltaSource",
    "FileSource",
    "Freshness",
    "Join",
    "KafkaSource",
    "Lookup",
    "Pipeline",
    "RateLimit",
    "Sink",
    "Source",
    "SpecError",
    "Stateful",
    "Table",
    "Transform",
    "Trigger",
    "Watermark",
    "Window",
    "all_spec_paths",
    "ddl_columns",
    "duration_seconds",
    "goal_seconds",
    "environment_problems",
    "function_problems",
    "load_pipeline",
    "make_project_importable",
    "normalize_table_id",
    "resolve_setting",
    "signed_seconds",
    "spec_path_for",
    "unset_environment",
    "validate_all",
]
