"""Where bronze's json parse time goes: the same landed files through each layer of it, into Spark's `noop` sink.

Writes one JSON figure (bench/results-parse.json, not committed). One warm session, each variant repeated (median,
min, max): plain `spark.read.json`, text + `from_json`, text + millpond's byte parse (`millpond_parse_json_line`,
jvm/), bronze's writer shape (`parse_json_lines`, the batch's observed metrics, the good-row filter), the same on
the standard path (MILLPOND_JSON_FUNCTIONS=off: `from_json`, and `from_json` into `map<string,variant>` for the new
fields and `_rescued_data`, whose `map_filter` whole-stage codegen cannot compile), and without the check for fields
the schema does not name (`_new_fields`, which `schema_drift` needs). It counts the rows of bronze's whole parse
(every column, good and bad lines) that differ between the two paths. Each variant also records its
whole-stage-codegen stages' largest generated method in bytes. HotSpot by default does not JIT-compile a method
over 8,000 bytes, so millpond's JVMs start with `-XX:-DontCompileHugeMethods` (millpond.driver.driver_jit); with
`--hotspot-default` this script starts its JVM without it (results-parse-hotspot-default.json), to show what the
option is worth. Not a timed test; it says which part of B3's gap is what. Usage:

    .venv/bin/python bench/parse_cost.py [--scale large] [--repeats 3] [--hotspot-default]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def largest_methods(frame) -> list[int]:
    """Each whole-stage-codegen stage's largest generated method, in bytecode bytes (Spark's debug package)."""
    stages = frame.sparkSession._jvm.org.apache.spark.sql.execution.debug.package.codegenStringSeq(
        frame._jdf.queryExecution().executedPlan()
    )
    return [stages.apply(i)._3().maxMethodCodeSize() for i in range(stages.size())]


def seconds(make, repeats: int) -> dict:
    """Median/min/max of writing the frame `make()` builds to the noop sink, after one untimed warm-up."""
    make().write.format("noop").mode("overwrite").save()
    taken = []
    for _ in range(repeats):
        started = time.perf_counter()
        make().write.format("noop").mode("overwrite").save()
        taken.append(round(time.perf_counter() - started, 2))
    return {"median": statistics.median(taken), "min": min(taken), "max": max(taken), "n": repeats}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="large")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hotspot-default", action="store_true", help="start the JVM without millpond's JIT option")
    args = parser.parse_args()

    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from bench import data
    from millpond.driver import sources
    from millpond.driver.driver_jit import java_options
    from millpond.driver.session import build_spark_session
    from millpond.driver.sinks.landing import landing_batch_metrics
    from millpond.driver.speedups import JSON_FUNCTIONS
    from millpond.spec import load_pipeline

    files = [str(f) for f in data.pool(args.scale)[: data.SCALES[args.scale].b3_files]]
    pipeline = load_pipeline("activity")
    source = pipeline.sources["landing.activity"]
    jvm_options = "" if args.hotspot_default else java_options("full")  # what millpond starts a big run's JVM with
    spark = build_spark_session("bench:parse-cost", pipeline.shuffle_partitions, driver_java_options=jvm_options)

    def lines():
        return (
            spark.read.format("text")
            .load(files)
            .select("value", F.col("_metadata.file_path").alias(sources.SOURCE_FILE))
        )

    def parsed():  # every column of bronze's parse, good and bad lines
        return sources.parse_json_lines(lines(), StructType.fromDDL(source.schema), source.options)

    def good_rows():  # what bronze's writer keeps of a parsed batch, counting it as it goes
        observed = parsed().observe(Observation(), *landing_batch_metrics(rereadable=True))
        return observed.where(F.col(sources.ERROR).isNull()).drop(sources.RAW, sources.ERROR, sources.LINE_BUCKET)

    def swapped(name, replacement, make):
        """`make()` built with one layer of bronze's parse (`sources.<name>`) replaced."""
        original = getattr(sources, name)
        setattr(sources, name, replacement)
        try:
            return make()
        finally:
            setattr(sources, name, original)

    def standard(make):  # bronze's parse with MILLPOND_JSON_FUNCTIONS=off: Spark's from_json and map_filter
        os.environ[JSON_FUNCTIONS.env] = "off"
        try:
            return make()
        finally:
            os.environ.pop(JSON_FUNCTIONS.env)

    def no_new_fields(*_args):
        return F.lit(None).cast("array<string>")

    with_corrupt = StructType.fromDDL(source.schema).add("_corrupt_record", "string")
    permissive = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    variants = {
        "plain_read_json": lambda: spark.read.schema(source.schema).json(files),
        "text_then_from_json": lambda: lines().select(F.from_json("value", with_corrupt).alias("j")).select("j.*"),
        "text_then_byte_parse": lambda: (
            lines()
            .select(sources.parse_json_line(F.col("value"), with_corrupt, permissive, spark).alias("j"))
            .select("j.*")
        ),
        "bronze_writer": good_rows,
        "bronze_writer_standard_path": lambda: standard(good_rows),
        "bronze_writer_without_new_field_check": lambda: swapped("_new_fields", no_new_fields, good_rows),
    }
    ours, reference = parsed(), standard(parsed)
    figure = {
        "jvm_options": jvm_options,
        "files": len(files),
        "mb": round(data.size_bytes([Path(f) for f in files]) / 2**20, 1),
        "seconds": {name: seconds(make, args.repeats) for name, make in variants.items()},
        "largest_method_bytes_per_stage": {name: largest_methods(make()) for name, make in variants.items()},
        # the Java functions must not change a single row: 0, or the timings compare different work
        "parsed_rows_differing_from_standard_path": ours.exceptAll(reference).count()
        + reference.exceptAll(ours).count(),
    }
    out = REPO / "bench" / ("results-parse-hotspot-default.json" if args.hotspot_default else "results-parse.json")
    out.write_text(json.dumps(figure, indent=2) + "\n")
    print(json.dumps(figure, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
