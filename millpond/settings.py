"""Every `MILLPOND_*` environment variable, with its default and meaning: the only module that reads them.

Why one module: a setting read in many places drifts (two defaults, a typo that silently means "off"), and a user
cannot find out what exists. Values are read when asked for, not at import, so a test or a long-lived process sees
the environment as it is now. `docs/configuration.md` is generated from `ALL` (`python -m millpond.settings`), and
a test fails when the two differ.

Where a millpond project lives (its `pipelines/`, `expectations/`, `lake/`) is settled here too: the platform is an
installed package and knows nothing of the checkout it may have come from.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    """One environment variable: `default` is what an unset or blank value means ("" = no value)."""

    name: str
    default: str
    meaning: str
    group: str

    def raw(self) -> str | None:
        """The variable as set (stripped), or None when unset or blank."""
        value = os.environ.get(self.name, "").strip()
        return value or None

    def value(self) -> str:
        return self.raw() or self.default

    def choice(self) -> str:
        """The value lower-cased, for on/off style switches (validated by the module that owns the switch)."""
        return self.value().lower()

    def seconds(self) -> float:
        value = self.value()
        try:
            return float(value)
        except ValueError:
            raise SettingError(
                f"{self.name}={value!r} is not a number of seconds. Fix: set it to e.g. "
                f"{self.default} (the default) or unset it"
            ) from None

    def integer(self) -> int:
        value = self.value()
        try:
            return int(value)
        except ValueError:
            raise SettingError(
                f"{self.name}={value!r} is not a whole number. Fix: set it to e.g. {self.default} "
                "(the default) or unset it"
            ) from None


class SettingError(ValueError):
    """A setting holds a value millpond cannot use; the message names the variable and the fix."""


PLACES, SPARK, SPEEDUPS, AIRFLOW, TESTING = (
    "Where things are",
    "Spark",
    "Speed-ups (each can be switched off)",
    "Airflow tasks",
    "Testing",
)

PROJECT = Setting(
    "MILLPOND_PROJECT",
    "",
    "The millpond project folder (holding `pipelines/`, `expectations/`, "
    "`dags/`, `spark_jobs/`). Default: the nearest folder at or above the working directory that "
    "holds `pipelines/`, else the working directory.",
    PLACES,
)
LAKE = Setting(
    "MILLPOND_LAKE",
    "",
    "The lake root: every table, checkpoint, quarantine, report and system table "
    "lives under it. Default: `<project>/lake`.",
    PLACES,
)
PIPELINES = Setting(
    "MILLPOND_PIPELINES", "", "The folder of pipeline specs (`*.yaml`). Default: `<project>/pipelines`.", PLACES
)
EXPECTATIONS = Setting(
    "MILLPOND_EXPECTATIONS",
    "",
    "The folder of expectation suites (`*.json`). Default: `<project>/expectations`.",
    PLACES,
)
JARS = Setting(
    "MILLPOND_JARS",
    "",
    "The folder of jars every Spark application ships: Delta's and Kafka's (`millpond jars`, or `make jars` in "
    "a checkout) and millpond's functions (inside the wheel, or `make jvm`). Default: `<project>/.cache/jars`.",
    PLACES,
)
REPORT_ASSETS = Setting(
    "MILLPOND_REPORT_ASSETS",
    "",
    "The stylesheets and scripts Data Docs pages load "
    "(`make report-assets`), so reports render offline. Default: "
    "`<project>/.cache/report-assets`.",
    PLACES,
)
S3A_JARS = Setting(
    "MILLPOND_S3A_JARS",
    "",
    "The folder of hadoop-aws and the AWS SDK bundle Spark needs for an `s3a://` lake (`make s3a-jars`); on Spark's "
    "classpath only when the lake is on object storage. Default: `<project>/.cache/s3a-jars`.",
    PLACES,
)
CATALOG_HOME = Setting(
    "MILLPOND_CATALOG_HOME",
    "",
    "Where the catalog's embedded PostgreSQL keeps its data (readable by its owner only), its generated password and "
    "its port (docs/sql.md). Default: `<project>/catalog_home`.",
    PLACES,
)
METASTORE_URL = Setting(
    "MILLPOND_METASTORE_URL",
    "",
    "The JDBC URL of a PostgreSQL database to keep the catalog in instead of the embedded one "
    "(`jdbc:postgresql://host:5432/metastore`, as docker-compose's `postgres` service); with "
    "MILLPOND_METASTORE_USER and MILLPOND_METASTORE_PASSWORD. Unset: millpond starts its own on loopback.",
    PLACES,
)
METASTORE_USER = Setting(
    "MILLPOND_METASTORE_USER", "millpond", "The user millpond logs in as to MILLPOND_METASTORE_URL's database.", PLACES
)
METASTORE_PASSWORD = Setting(
    "MILLPOND_METASTORE_PASSWORD", "", "The password of MILLPOND_METASTORE_USER (never logged).", PLACES
)
LEASE_SECONDS = Setting(
    "MILLPOND_LEASE_SECONDS",
    "60",
    "On an object-store lake, how long a pipeline's lease outlives its holder's last renewal (renewed every third "
    "of it): a crashed run blocks the next one at most this long.",
    PLACES,
)
SPARK_MASTER = Setting(
    "MILLPOND_SPARK_MASTER",
    "local[2]",
    "The Spark master of a run that starts its own JVM "
    "(`millpond run`; Airflow tasks use the `spark_millpond` connection).",
    SPARK,
)
SPARK_UI = Setting("MILLPOND_SPARK_UI", "false", "`true` starts Spark's web UI for each run.", SPARK)
DRIVER_MEMORY = Setting("MILLPOND_DRIVER_MEMORY", "2g", "The driver's heap (`spark.driver.memory`).", SPARK)
SPARK_LOG_LEVEL = Setting(
    "MILLPOND_SPARK_LOG_LEVEL",
    "",
    "Spark's log level. Default: ERROR in a run that starts its own JVM, WARN in an Airflow task's spark-submit.",
    SPARK,
)
DRIVER_JIT = Setting(
    "MILLPOND_DRIVER_JIT",
    "auto",
    "The driver JVM's JIT: `auto` (C1 only for a small increment, "
    "the full tiered JIT otherwise), `quick`, `full`, or `off` (HotSpot's defaults, for every JVM "
    "millpond starts).",
    SPEEDUPS,
)
JSON_FUNCTIONS = Setting(
    "MILLPOND_JSON_FUNCTIONS",
    "on",
    "`off` parses json landing files with Spark's own from_json only, not millpond's Java functions.",
    SPEEDUPS,
)
DELTA_RS_COMMITS = Setting(
    "MILLPOND_DELTA_RS_COMMITS", "on", "`off` makes every data commit through Spark, none through delta-rs.", SPEEDUPS
)
CLASS_ARCHIVE = Setting(
    "MILLPOND_CLASS_ARCHIVE",
    "on",
    "`off` starts a run's driver JVM without the class-data archive `millpond class-archive` builds (`make setup` "
    "runs it): every class is then loaded from Spark's jars.",
    SPEEDUPS,
)
LOCK_WAIT_SECONDS = Setting(
    "MILLPOND_LOCK_WAIT_SECONDS",
    "600",
    "How long an Airflow task waits for the pipeline lock before failing as busy.",
    AIRFLOW,
)
RETRY_DELAY_SECONDS = Setting(
    "MILLPOND_RETRY_DELAY_SECONDS", "300", "The delay before an Airflow task's retry.", AIRFLOW
)
SPARK_TASK_TIMEOUT_SECONDS = Setting(
    "MILLPOND_SPARK_TASK_TIMEOUT_SECONDS",
    "7200",
    "An Airflow Spark task running longer is stopped (its Spark application with it).",
    AIRFLOW,
)
FRESHNESS_SCHEDULE = Setting(
    "MILLPOND_FRESHNESS_SCHEDULE",
    "*/5 * * * *",
    "How often the `millpond_freshness` DAG checks every table with a freshness goal (a cron expression, UTC).",
    AIRFLOW,
)
DEADLINE_ALERTS = Setting(
    "MILLPOND_DEADLINE_ALERTS",
    "off",
    "`on` gives each pipeline DAG with freshness goals Airflow's DeadlineAlert (docs/freshness.md); `make up` and "
    "docker compose turn it on. Off by default: Airflow 3.3.2's `airflow dags test` (what `make demo` runs) exits "
    "non-zero after a successful run of a DAG with a deadline (apache/airflow#73428).",
    AIRFLOW,
)
ALERT_FILE = Setting(
    "MILLPOND_ALERT_FILE",
    "",
    "A file the freshness sentinel and the pipeline DAGs' deadline alerts append each alert to, one JSON line each. "
    "Unset: alerts are logged, nothing is sent (the sentinel still records each change in `_system/freshness`); for "
    "mail or Slack pass an Airflow notifier to `build_all` in the DAG file (docs/freshness.md).",
    AIRFLOW,
)
LINEAGE_TIMEOUT_SECONDS = Setting(
    "MILLPOND_LINEAGE_TIMEOUT_SECONDS",
    "10",
    "How long a run waits for its OpenLineage events to be sent (openlineage.yml or OPENLINEAGE__* configure "
    "where); a receiver slower or down is logged and the run goes on. The events are also kept in `_system/lineage`.",
    AIRFLOW,
)
KAFKA_BOOTSTRAP = Setting(
    "MILLPOND_KAFKA_BOOTSTRAP",
    "",
    "The Kafka bootstrap servers the example `device_status` "
    "spec reads as `${MILLPOND_KAFKA_BOOTSTRAP}`; `make kafka-up` prints a local one. Unset, "
    "that pipeline's DAG is paused with the reason.",
    AIRFLOW,
)
FAULT = Setting(
    "MILLPOND_FAULT",
    "",
    "`<table id>:<point>[:<batch id>]` makes the run SIGKILL itself there: the "
    "fault-injection tests' hook. Never set it in production.",
    TESTING,
)
FAULT_PAUSE_FILE = Setting(
    "MILLPOND_FAULT_PAUSE_FILE",
    "",
    "With MILLPOND_FAULT: instead of the SIGKILL, the run creates this file at the fault point and waits there "
    "until the test deletes it (at most 300 s): a test acts while a run is mid-batch. Never set it in production.",
    TESTING,
)
TEST_ENGINE = Setting(
    "MILLPOND_TEST_ENGINE",
    "off",
    "`on` (`make test-engine`): the test suite starts one engine per test worker and sends every run it starts there "
    "through SPARK_REMOTE.",
    TESTING,
)

ALL = (
    PROJECT,
    LAKE,
    PIPELINES,
    EXPECTATIONS,
    JARS,
    REPORT_ASSETS,
    S3A_JARS,
    CATALOG_HOME,
    METASTORE_URL,
    METASTORE_USER,
    METASTORE_PASSWORD,
    LEASE_SECONDS,
    SPARK_MASTER,
    SPARK_UI,
    DRIVER_MEMORY,
    SPARK_LOG_LEVEL,
    DRIVER_JIT,
    JSON_FUNCTIONS,
    DELTA_RS_COMMITS,
    CLASS_ARCHIVE,
    LOCK_WAIT_SECONDS,
    RETRY_DELAY_SECONDS,
    SPARK_TASK_TIMEOUT_SECONDS,
    FRESHNESS_SCHEDULE,
    DEADLINE_ALERTS,
    ALERT_FILE,
    LINEAGE_TIMEOUT_SECONDS,
    KAFKA_BOOTSTRAP,
    FAULT,
    FAULT_PAUSE_FILE,
    TEST_ENGINE,
)


def in_environment() -> dict[str, str]:
    """Every millpond setting this process has set, as a child process needs it."""
    return {s.name: os.environ[s.name] for s in ALL if s.name in os.environ}


def project_root() -> Path:
    if (explicit := PROJECT.raw()) is not None:
        return Path(explicit).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "pipelines").is_dir():
            return folder
    return here


def _place(setting: Setting, *default: str) -> Path:
    raw = setting.raw()
    return Path(raw).resolve() if raw is not None else project_root().joinpath(*default)


def lake_root() -> Path:
    """The lake as a local (or mounted) folder. An object-store lake is refused here: as a Path, `s3a://bucket/lake`
    would silently become a local folder `s3a:/bucket/lake`. The lake's own modules take `millpond.lake.paths
    .lake_root()`, which also gives an object-store lake; only what still needs a folder calls this."""
    if (url := lake_url()) is not None:
        raise SettingError(
            f"MILLPOND_LAKE={url!r} is on object storage, and this command reads the lake as a local folder "
            "(docs/object-storage.md lists what works on s3a://). Fix: point MILLPOND_LAKE at a local or shared "
            "folder for this command"
        )
    return _place(LAKE, "lake")


def lake_url() -> str | None:
    """MILLPOND_LAKE when it names an object store (`s3a://...` or `s3://...`), else None."""
    raw = LAKE.raw()
    if raw is not None and "://" in raw and raw.split("://", 1)[0].lower() in ("s3a", "s3"):
        return raw
    return None


def pipelines_dir() -> Path:
    return _place(PIPELINES, "pipelines")


def expectations_dir() -> Path:
    return _place(EXPECTATIONS, "expectations")


def jars_dir() -> Path:
    return _place(JARS, ".cache", "jars")


def s3a_jars_dir() -> Path:
    return _place(S3A_JARS, ".cache", "s3a-jars")


def report_assets_dir() -> Path:
    return _place(REPORT_ASSETS, ".cache", "report-assets")


def catalog_home() -> Path:
    return _place(CATALOG_HOME, "catalog_home")


def cache_dir() -> Path:
    """Downloaded and built things a project needs locally (never committed): jars, report assets, a Kafka broker."""
    return project_root() / ".cache"


def configuration_markdown() -> str:
    """docs/configuration.md: every setting, grouped, as `python -m millpond.settings` prints it."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m millpond.settings > docs/configuration.md`: edit "
        "millpond/settings.py, not this file. -->",
        "",
        "millpond reads these environment variables, and no others. Anything a pipeline means lives in its spec; "
        "these say where things are and how a run is executed.",
        "",
    ]
    for group in dict.fromkeys(s.group for s in ALL):
        lines += [f"## {group}", "", "| Variable | Default | Meaning |", "|---|---|---|"]
        for s in (s for s in ALL if s.group == group):
            default = f"`{s.default}`" if s.default else "(see meaning)"
            lines.append(f"| `{s.name}` | {default} | {s.meaning} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(configuration_markdown())
