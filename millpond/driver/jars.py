"""The jars every millpond Spark application ships, found without starting a JVM (Airflow's task process needs
them for spark-submit's --jars)."""

from __future__ import annotations

from pathlib import Path

from millpond import settings

# millpond's own Spark functions (jvm/), which `make jvm` compiles next to the fetched jars.
FUNCTIONS_JAR = "millpond-spark.jar"
# Where an installed wheel carries the functions jar (package data, built by scripts/build-wheel.sh): a project
# outside the repository has no jvm/ to compile.
BUNDLED_FUNCTIONS_JAR = Path(__file__).resolve().parent / "lib" / FUNCTIONS_JAR


def spark_jars() -> list[str]:
    """Delta's and Kafka's jars (`millpond jars` or `make jars` fetches them) and millpond's functions (the jar
    folder's, else the wheel's), or a clear error: both local sessions and spark-submit need them."""
    folder = settings.jars_dir()
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise RuntimeError(
            f"Delta jars not found in {folder}. Fix: run `millpond jars` (downloads them from Maven Central) or, "
            "in a millpond checkout, `make jars`; or set MILLPOND_JARS to a folder holding them."
        )
    if not (folder / FUNCTIONS_JAR).is_file():
        if not BUNDLED_FUNCTIONS_JAR.is_file():
            raise RuntimeError(
                f"{FUNCTIONS_JAR} (millpond's Spark functions) not found in {folder}. Fix: run "
                "`make jvm` (needs a JDK 17's javac)."
            )
        jars.append(str(BUNDLED_FUNCTIONS_JAR))
    return jars
