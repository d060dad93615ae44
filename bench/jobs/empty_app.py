"""B5's baseline: the emptiest Spark application, submitted like millpond's (same jars and session settings)."""

from __future__ import annotations

from millpond.driver.session import build_spark_session

if __name__ == "__main__":
    build_spark_session("bench:empty").stop()
