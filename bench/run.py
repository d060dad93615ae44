"""`make bench`: millpond side by side with plain Spark, a full reprocess and DuckDB, on this machine, in one run.

    python -m bench.run [--scale small|large|tiny] [--only B1,B3] [--out bench/results-<scale>.json]

Every figure is a ratio of two measurements taken here, now, alternating sides (so a noisy neighbour hurts both),
each side repeated (median, min and max kept). Writes the JSON results and a markdown table next to them.
What each benchmark measures and its goal: BENCHMARKS below and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path

from bench import data
from bench.probe import Measured, measure, millpond_command, spread
from millpond.engine import jars, warm_driver


class Bench:
    """Lakes and runs shared by several benchmarks (B1, B2 and B7 read the same incremental runs)."""

    def __init__(self, scale_name: str):
        self.scale_name, self.scale = scale_name, data.SCALES[scale_name]
        self.work = data.CACHE / f"work-{scale_name}"
        self.files = data.pool(scale_name)
        unit = self.scale.unit_files
        self.history_1x, self.history_100x = self.files[:unit], self.files[: 100 * unit]
        self.increment = self.files[100 * unit : 101 * unit]
        self._built: set[str] = set()

    def lake(self, name: str) -> Path:
        return self.work / name

    def built(self, history: str) -> Path:
        """The 1x or 100x lake with its history processed (100x in `history_runs` rounds), built on first use."""
        lake = self.lake(f"lake-{history}")
        if history not in self._built:
            files, runs = (self.history_1x, 1) if history == "1x" else (self.history_100x, self.scale.history_runs)
            data.build_lake(lake, files, runs)
            self._built.add(history)
        return lake

    @cached_property
    def incremental_runs(self) -> dict[str, list[Measured]]:
        """The same new files landed on each history and run by `millpond run`, sides alternating.

        A third side runs the 100x increment with the driver's default JIT instead of the C1-only one millpond picks
        for a small run (millpond.engine.driver_jit), so the results show what that choice buys.
        """
        runs: dict[str, list[Measured]] = {"1x": [], "100x": [], FULL_JIT: []}
        for rep in range(self.scale.repeats):
            for side in runs:
                lake = self.built(side.split("-")[0])
                data.restore_lake(lake)
                data.land(lake, self.increment)
                jit = {"MILLPOND_DRIVER_JIT": "full"} if side == FULL_JIT else {}
                runs[side].append(run_millpond(lake, "--run-id", f"bench-increment-{rep}", env=jit))
        return runs

    def fresh_lake(self, name: str, files: list[Path]) -> Path:
        lake = self.lake(name)
        shutil.rmtree(lake, ignore_errors=True)
        data.land(lake, files)
        return lake


FULL_JIT = "100x-full-jit"


def run_millpond(lake: Path, *args: str, env: dict[str, str] | None = None) -> Measured:
    return measure(millpond_command(*args), {"MILLPOND_LAKE": str(lake), **(env or {})})


def driver_jit(runs: list[Measured]) -> list[str]:
    """The driver JIT each run's JVM ran with, as the runner read it back from the JVM (`millpond: driver JIT`)."""
    return sorted(
        {
            line.split("millpond: driver JIT ", 1)[1].split(":")[0]
            for r in runs
            for line in r.output.splitlines()
            if "millpond: driver JIT " in line
        }
    )


def b1_history_growth(bench: Bench) -> dict:
    runs = {h: bench.incremental_runs[h] for h in ("1x", "100x")}
    walls = {h: spread([r.wall for r in rs]) for h, rs in runs.items()}
    return {
        "what": "wall seconds of `millpond run` on the same new files (1 % of the 100x history) after 100x ÷ 1x",
        "ratio": round(walls["100x"]["median"] / walls["1x"]["median"], 3),
        "goal": {"max": 1.2},
        "detail": {
            "wall_seconds": walls,
            "phases_median": {h: median_phases(rs) for h, rs in runs.items()},
            "history_files": {"1x": len(bench.history_1x), "100x": len(bench.history_100x)},
            "history_mb": {"1x": mb(bench.history_1x), "100x": mb(bench.history_100x)},
            "new_files": len(bench.increment),
            "new_mb": mb(bench.increment),
            "history_runs": {"1x": 1, "100x": bench.scale.history_runs},
            "driver_jit": {h: driver_jit(rs) for h, rs in runs.items()},
        },
    }


def b2_full_reprocess(bench: Bench) -> dict:
    """Full refreshes (cold, a JVM each) alternating with the same increment handed to a warm driver.

    The warm side is what MILLPOND_WARM_DRIVER=on ships: `millpond run` (a new client process, timed whole) hands the
    run to the lake's driver, which has already run `WARM_UP_RUNS` increments on this lake, as an hourly schedule's
    driver has. The lake is restored under it between runs; the driver re-reads every Delta log per run anyway.
    """
    lake = bench.built("100x")
    warm_env = {"MILLPOND_LAKE": str(lake), warm_driver.ENV: "on"}
    started = measure([str(Path(sys.executable).parent / "millpond"), "driver", "start"], warm_env)
    try:
        for rep in range(WARM_UP_RUNS):
            data.restore_lake(lake)
            data.land(lake, bench.increment)
            run_millpond(lake, "--run-id", f"bench-warm-up-{rep}", env=warm_env)
        full, warm = [], []
        for rep in range(bench.scale.repeats):
            data.restore_lake(lake)
            data.land(lake, bench.increment)
            full.append(run_millpond(lake, "--run-id", f"bench-full-{rep}", "--full-refresh", "bronze.activity"))
            data.restore_lake(lake)
            data.land(lake, bench.increment)
            warm.append(run_millpond(lake, "--run-id", f"bench-warm-{rep}", env=warm_env))
        driver = warm_driver.status(lake)
    finally:
        warm_driver.stop(lake)
    incremental, full_jit = bench.incremental_runs["100x"], bench.incremental_runs[FULL_JIT]
    full_wall, incremental_wall = spread([r.wall for r in full]), spread([r.wall for r in incremental])
    full_jit_wall = spread([r.wall for r in full_jit])
    warm_wall = spread([r.wall for r in warm])
    handed = sum("run handed to the warm driver" in r.output for r in warm)
    return {
        "what": "wall seconds to rebuild every table from all 101 units of landed files ÷ the incremental run "
        "that adds the newest unit",
        "ratio": round(full_wall["median"] / incremental_wall["median"], 2),
        "goal": {"min": 20},
        "detail": {
            "full_refresh_seconds": full_wall,
            "incremental_seconds": incremental_wall,
            "full_refresh_phases_median": median_phases(full),
            "full_refresh_peak_rss_mb": spread([r.peak_rss_mb for r in full], 0),
            "driver_jit": {"full_refresh": driver_jit(full), "incremental": driver_jit(incremental)},
            "incremental_full_jit_seconds": full_jit_wall,
            "incremental_full_jit_phases_median": median_phases(full_jit),
            "quick_jit_speedup": round(full_jit_wall["median"] / incremental_wall["median"], 3),
            "warm_driver_start_seconds": round(started.wall, 2),
            "warm_driver_warm_up_runs": WARM_UP_RUNS,
            "incremental_warm_driver_seconds": warm_wall,
            "incremental_warm_driver_phases_median": median_phases(warm),
            "warm_driver_runs_handed_over": f"{handed} of {len(warm)}",
            "warm_driver_runs_served": driver["runs"] if driver else None,
            "ratio_with_warm_driver": round(full_wall["median"] / warm_wall["median"], 2),
        },
    }


WARM_UP_RUNS = 3


def b3_ingest_vs_plain_spark(bench: Bench) -> dict:
    files = bench.files[: bench.scale.b3_files]
    ours, plain = [], []
    for rep in range(bench.scale.b3_repeats):
        lake = bench.fresh_lake("ingest", files)
        ours.append(run_millpond(lake, "--tables", "bronze.activity", "--run-id", f"bench-ingest-{rep}"))
        target = bench.lake("plain-spark-table")
        shutil.rmtree(target, ignore_errors=True)
        plain.append(measure([sys.executable, "-m", "bench.jobs.plain_spark", str(lake / data.LANDING), str(target)]))
    ours_rows_in = json.loads((lake / "_system" / "runs" / "activity" / f"bench-ingest-{rep}.json").read_text())
    ours_s = spread([r.phases["bronze.activity"] for r in ours])
    plain_s = spread([r.last_json()["seconds"] for r in plain])
    rows, size, cores = plain[0].last_json()["rows"], data.size_bytes(files), os.cpu_count() or 1
    return {
        "what": "bronze ingest throughput ÷ a plain Spark batch job (read JSON, write Delta, same session settings) "
        "on the same files; both timed from a ready session to the committed table",
        "ratio": round(plain_s["median"] / ours_s["median"], 3),
        "goal": {"min": 0.8},
        "detail": {
            "files": len(files),
            "mb": round(size / 2**20, 1),
            "rows": rows,
            "ours_rows_in": ours_rows_in["tables"][0]["rows_in"],
            "ours_seconds": ours_s,
            "plain_spark_seconds": plain_s,
            "ours_rows_per_s_per_core": round(rows / ours_s["median"] / cores),
            "plain_rows_per_s_per_core": round(rows / plain_s["median"] / cores),
            "ours_mb_per_s_per_core": round(size / 2**20 / ours_s["median"] / cores, 2),
            "plain_mb_per_s_per_core": round(size / 2**20 / plain_s["median"] / cores, 2),
            "ours_durations_note": "bronze's seconds include checkpoint checks, query start and the "
            "quarantine split; the plain job has none of these",
        },
    }


def b4_vs_duckdb(bench: Bench) -> dict:
    files = bench.files[: bench.scale.b3_files]
    tables = ("bronze.activity", "silver.activity", "gold.device_counts")
    ours, duck, plain = [], [], []
    for rep in range(bench.scale.repeats):
        lake = bench.fresh_lake("duckdb-compare", files)
        ours.append(run_millpond(lake, "--tables", ",".join(tables), "--run-id", f"bench-duckdb-{rep}"))
        database = bench.lake("duckdb.db")
        database.unlink(missing_ok=True)
        duck.append(measure([sys.executable, "-m", "bench.jobs.duckdb_load", str(lake / data.LANDING), str(database)]))
        output = bench.lake("plain-spark-pipeline")
        shutil.rmtree(output, ignore_errors=True)
        plain.append(
            measure([sys.executable, "-m", "bench.jobs.plain_spark_pipeline", str(lake / data.LANDING), str(output)])
        )
    ours_s = spread([sum(r.phases[t] for t in tables) for r in ours])
    duck_s = spread([r.last_json()["seconds"] for r in duck])
    plain_s = spread([r.last_json()["seconds"] for r in plain])
    ours_wall, duck_wall = spread([r.wall for r in ours]), spread([r.wall for r in duck])
    return {
        "what": "bronze + silver (dedup, gate) + gold.device_counts seconds ÷ DuckDB loading the same JSON, "
        "deduplicating and aggregating into a database file; JVM and interpreter start excluded",
        "ratio": round(ours_s["median"] / duck_s["median"], 2),
        "goal": {"max": 3},
        "detail": {
            "files": len(files),
            "mb": round(data.size_bytes(files) / 2**20, 1),
            "ours_seconds": ours_s,
            "duckdb_seconds": duck_s,
            "ours_phases_median": median_phases(ours),
            # The engine's own floor: plain Spark batch jobs doing the same three steps. Ours cannot go
            # below it, so a floor above the goal means the goal needs another engine, not a faster millpond.
            "plain_spark_seconds": plain_s,
            "plain_spark_over_duckdb": round(plain_s["median"] / duck_s["median"], 2),
            "ours_over_plain_spark": round(ours_s["median"] / plain_s["median"], 2),
            "ratio_with_start": round(ours_wall["median"] / duck_wall["median"], 2),
            "ours_wall_seconds": ours_wall,
            "duckdb_wall_seconds": duck_wall,
        },
    }


def b5_fixed_overhead(bench: Bench) -> dict:
    lake = bench.built("1x")
    data.restore_lake(lake)
    ours, bare = [], []
    for rep in range(bench.scale.repeats):
        ours.append(run_millpond(lake, "--run-id", f"bench-noop-{rep}"))
        bare.append(measure([spark_submit(), *submit_args(), str(data.REPO / "bench" / "jobs" / "empty_app.py")]))
    airflow = [run_dag(lake) for _ in range(bench.scale.repeats)]
    ours_s, bare_s = spread([r.wall for r in ours]), spread([r.wall for r in bare])
    airflow_s = spread([r.wall for r in airflow])
    apps = median_phases(airflow)
    spark_seconds = sum(apps.values())
    return {
        "what": "wall seconds of `millpond run` finding no new data ÷ `spark-submit` of an empty application "
        "(same jars and settings)",
        "ratio": round(ours_s["median"] / bare_s["median"], 2),
        "goal": {"max": 1.5},
        "detail": {
            "millpond_run_seconds": ours_s,
            "bare_spark_submit_seconds": bare_s,
            "millpond_run_phases_median": median_phases(ours),
            "airflow_dags_test_seconds": airflow_s,
            "airflow_ratio_to_bare": round(airflow_s["median"] / bare_s["median"], 2),
            "airflow_phases_median": apps
            | {
                "airflow_overhead (dags test wall minus the Spark applications' phases)": round(
                    airflow_s["median"] - spark_seconds, 2
                )
            },
        },
    }


def b6_dag_parse(bench: Bench) -> dict:
    code = (
        "import json, sys, time\nimport airflow\nfrom airflow.dag_processing.dagbag import DagBag\n"
        "started = time.perf_counter()\nbag = DagBag(dag_folder=sys.argv[1])\n"
        "print(json.dumps({'seconds': time.perf_counter() - started, 'dags': len(bag.dags), "
        "'errors': len(bag.import_errors)}))"
    )
    runs = [measure([sys.executable, "-c", code, str(data.REPO / "dags")]).last_json() for _ in range(5)]
    if any(r["errors"] for r in runs):
        raise RuntimeError("dags/ has import errors")
    seconds = spread([r["seconds"] for r in runs], 3)
    return {
        "what": "seconds to parse the whole dags/ folder (DagBag), after `import airflow` and DagBag's import",
        "ratio": seconds["median"],
        "unit": "seconds",
        "goal": {"max": 0.3},
        "detail": {"parse_seconds": seconds, "dags": runs[0]["dags"]},
    }


def b7_memory(bench: Bench) -> dict:
    runs = {h: bench.incremental_runs[h] for h in ("1x", "100x")}
    rss = {h: spread([r.peak_rss_mb for r in rs], 0) for h, rs in runs.items()}
    return {
        "what": "peak RSS (driver + JVM, sampled every 50 ms) of the B1 run after 100x history ÷ after 1x",
        "ratio": round(rss["100x"]["median"] / rss["1x"]["median"], 3),
        "goal": {"max": 1.2},
        "detail": {"peak_rss_mb": rss, "driver_memory": os.environ.get("MILLPOND_DRIVER_MEMORY", "2g")},
    }


BENCHMARKS = {
    "B1": b1_history_growth,
    "B2": b2_full_reprocess,
    "B3": b3_ingest_vs_plain_spark,
    "B4": b4_vs_duckdb,
    "B5": b5_fixed_overhead,
    "B6": b6_dag_parse,
    "B7": b7_memory,
}


def median_phases(runs: list[Measured]) -> dict[str, float]:
    names = sorted({name for r in runs for name in r.phases})
    return {n: spread([r.phases.get(n, 0.0) for r in runs])["median"] for n in names}


def mb(files: list[Path]) -> float:
    return round(data.size_bytes(files) / 2**20, 1)


def spark_submit() -> str:
    return str(Path(sys.executable).parent / "spark-submit")


def submit_args() -> list[str]:
    from millpond.airflow.spark_app import spark_conf

    conf = [arg for key, value in spark_conf().items() for arg in ("--conf", f"{key}={value}")]
    return ["--master", "local[2]", "--jars", ",".join(jars.spark_jars()), *conf]


def run_dag(lake: Path) -> Measured:
    """One `airflow dags test activity` (what `make run-dag` runs) on the lake, with an Airflow home of its own.

    Its own home because the DAG's assets carry the lake's path: the project's Airflow database already knows
    `delta.bronze.activity` at the default lake and would refuse the same asset at another path.
    """
    home = lake.parent / f"airflow-{lake.name}"
    env = {"AIRFLOW_HOME": str(home), "MILLPOND_LAKE": str(lake), "MILLPOND_RETRY_DELAY_SECONDS": "5"}
    airflow = str(Path(sys.executable).parent / "airflow")
    if not (home / "airflow.db").exists():
        home.mkdir(parents=True, exist_ok=True)
        subprocess.run([airflow, "db", "migrate"], env={**os.environ, **env}, check=True, capture_output=True)
    return measure([airflow, "dags", "test", "activity"], env)


def environment(scale_name: str) -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    versions = {
        p: metadata.version(p) for p in ("pyspark", "delta-spark", "apache-airflow", "great-expectations", "duckdb")
    }
    return {
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "memory_gib": round(memory, 1),
            "os": platform.platform(),
            "python": platform.python_version(),
            "java": java,
        },
        "versions": versions,
        "scale": scale_name,
        "scale_detail": vars(data.SCALES[scale_name]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def markdown(results: dict) -> str:
    m, lines = results["machine"], []
    lines.append(
        f"`make bench SCALE={results['scale']}` on {results['date'][:10]}: {m['cpu']}, {m['cores']} cores, "
        f"{m['memory_gib']} GiB; " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + "."
    )
    lines += ["", "| | Benchmark | Result | Goal | Met |", "|---|---|---|---|---|"]
    for name, b in results["benchmarks"].items():
        if "error" in b:
            lines.append(f"| {name} | {b['what']} | error: {b['error'][:80]} | | no |")
            continue
        goal = b["goal"]
        kind, limit = ("≤", goal["max"]) if "max" in goal else ("≥", goal["min"])
        unit = " s" if b.get("unit") == "seconds" else ""
        lines.append(
            f"| {name} | {b['what']} | {b['ratio']}{unit} | {kind} {limit}{unit} | {'yes' if b['met'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def met(benchmark: dict) -> bool:
    goal = benchmark["goal"]
    return benchmark["ratio"] <= goal["max"] if "max" in goal else benchmark["ratio"] >= goal["min"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="small", choices=sorted(data.SCALES))
    parser.add_argument("--only", default="", help="comma-separated benchmarks (default: all)")
    parser.add_argument("--out", default=None, help="results file (default bench/results-<scale>.json)")
    args = parser.parse_args(argv)
    chosen = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHMARKS)
    out = Path(args.out or data.REPO / "bench" / f"results-{args.scale}.json")
    results = environment(args.scale) | {"benchmarks": {}}
    bench = Bench(args.scale)
    for name in chosen:
        started = time.perf_counter()
        print(f"bench: {name} ...", flush=True)
        try:
            result = BENCHMARKS[name](bench)
            result["met"] = met(result)
        except Exception as exc:  # one broken comparison must not hide the others' figures
            result = {"what": BENCHMARKS[name].__name__, "error": f"{type(exc).__name__}: {exc}"[:4000]}
        result["bench_seconds"] = round(time.perf_counter() - started, 1)
        results["benchmarks"][name] = result
        print(
            f"bench: {name} "
            + (
                f"ratio {result['ratio']} goal {result['goal']} met {result['met']}"
                if "ratio" in result
                else result["error"][:2000]
            ),
            flush=True,
        )
        out.write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    print(f"bench: results in {out} and {out.with_suffix('.md')}")
    return 1 if any("error" in b for b in results["benchmarks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
