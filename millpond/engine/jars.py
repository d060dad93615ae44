"""The jars every millpond Spark application ships, found without starting a JVM (Airflow's task process needs
them for spark-submit's --jars)."""

from __future__ import annotations

from millpond import settings

# millpond's own Spark functions (jvm/), which `make jvm` compiles next to the fetched jars.
FUNCTIONS_JAR = "millpond-spark.jar"


def spark_jars() -> list[str]:
    """Delta's and Kafka's jars (`make jars` fetches them) and millpond's functions (`make jvm` builds them), or a
    clear error: both local sessions and spark-submit need them."""
    folder = settings.jars_dir()
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise RuntimeError(
            f"Delta jars not found in {folder}. Fix: run `make jars` (needs Java 17 and Maven), or "
            "set MILLPOND_JARS to a folder holding them."
        )
    if not (folder / FUNCTIONS_JAR).is_file():
        raise RuntimeError(
            f"{FUNCTIONS_JAR} (millpond's Spark functions) not found in {folder}. Fix: run "
            "`make jvm` (needs a JDK 17's javac)."
        )
    return jars
