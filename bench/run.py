"""`make bench`: millpond side by side with plain Spark, Spark Declarative Pipelines, a full reprocess and DuckDB.

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path

from bench import data
from bench.check import check, millpond_tables
from bench.probe import Measured, measure, millpond_command, spread
from bench.sdp import Sdp
from millpond.driver import jars


class Bench:
    """Lakes and runs shared by several benchmarks (B1, B2 and B7 read the same incremental runs)."""

    def __init__(self, scale_name: str, repeats: int = 0):
        self.scale_name, self.scale = scale_name, data.SCALES[scale_name]
        if repeats:  # fewer (or more) repeats of every comparison, as --repeats asks: the JSON records n
            self.scale = replace(self.scale, repeats=repeats, b3_repeats=repeats, b8_repeats=repeats)
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
        for a small run (millpond.driver.driver_jit), so the results show what that choice buys.
        """
        runs: dict[str, list[Measured]] = {"1x": [], "100x": [], FULL_JIT: []}
        for rep in range(self.scale.repeats):
            for side in runs:
                lake = self.built(side.split("-")[0])
                data.restore_lake(lake)
                data.land(lake, self.increment)
                jit = {"MILLPOND_DRIVER_JIT": "full"} if side == FULL_JIT else {}
                runs[side].append(run_millpond(lake, "--run-id", f"bench-increment-{rep}", env=jit))
                if rep == 0:
                    check(f"B1 increment after {side}", lake / data.LANDING, millpond_tables(lake))
        return runs

    @contextmanager
    def engine(self) -> Iterator[tuple[str, float]]:
        """`millpond engine start` (its state in a lake of its own, so restoring a measured lake leaves it alone):
        (the SPARK_REMOTE it prints, seconds to start). Stopped on the way out."""
        home = self.lake("engine-home")
        home.mkdir(parents=True, exist_ok=True)
        env = {"MILLPOND_LAKE": str(home)}
        started = measure([millpond_bin(), "engine", "start"], env)
        remote = next(line for line in reversed(started.output.splitlines()) if line.startswith("sc://"))
        try:
            yield remote, round(started.wall, 2)
        finally:
            measure([millpond_bin(), "engine", "stop"], env)

    def fresh_lake(self, name: str, files: list[Path]) -> Path:
        lake = self.lake(name)
        shutil.rmtree(lake, ignore_errors=True)
        data.land(lake, files)
        return lake


FULL_JIT = "100x-full-jit"


def run_millpond(lake: Path, *args: str, env: dict[str, str] | None = None) -> Measured:
    return measure(millpond_command(*args), {"MILLPOND_LAKE": str(lake), **(env or {})})


def millpond_bin() -> str:
    return str(Path(sys.executable).parent / "millpond")


def on_engine(runs: list[Measured]) -> str:
    """How many runs said they ran on the engine (a run that quietly started its own JVM would not)."""
    return f"{sum('on the engine at' in r.output for r in runs)} of {len(runs)}"


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
    """The full rebuild ÷ the increment, judged with the engine running and also reported cold (a JVM per run).

    Engine side: `millpond engine start`, then `WARM_UP_RUNS` increments on this lake (as an hourly schedule's engine
    has run before), then full refreshes and increments alternating, each a new `millpond run` client timed whole.
    Cold side: full refreshes with a JVM each, against the B1 increments on the same lake. The lake is restored
    between runs, and the last run of each kind is checked against the reference.
    """
    lake = bench.built("100x")
    landing = lake / data.LANDING
    full_cold, full_warm, warm = [], [], []
    with bench.engine() as (remote, engine_start):
        engine_env = {"SPARK_REMOTE": remote}
        for rep in range(WARM_UP_RUNS):
            data.restore_lake(lake)
            data.land(lake, bench.increment)
            run_millpond(lake, "--run-id", f"bench-warm-up-{rep}", env=engine_env)
        for rep in range(bench.scale.repeats):
            for side, runs, env in (("full-cold", full_cold, {}), ("full-engine", full_warm, engine_env)):
                data.restore_lake(lake)
                data.land(lake, bench.increment)
                runs.append(
                    run_millpond(lake, "--run-id", f"bench-{side}-{rep}", "--full-refresh", "bronze.activity", env=env)
                )
                if rep == 0:
                    check(f"B2 {side}", landing, millpond_tables(lake))
            data.restore_lake(lake)
            data.land(lake, bench.increment)
            warm.append(run_millpond(lake, "--run-id", f"bench-increment-engine-{rep}", env=engine_env))
            if rep == 0:
                check("B2 increment on the engine", landing, millpond_tables(lake))
    incremental, full_jit = bench.incremental_runs["100x"], bench.incremental_runs[FULL_JIT]
    cold_wall, warm_full_wall = spread([r.wall for r in full_cold]), spread([r.wall for r in full_warm])
    incremental_wall, warm_wall = spread([r.wall for r in incremental]), spread([r.wall for r in warm])
    full_jit_wall = spread([r.wall for r in full_jit])
    return {
        "what": "wall seconds to rebuild every table from all 101 units of landed files ÷ the incremental run "
        "that adds the newest unit, both with the engine running",
        "ratio": round(warm_full_wall["median"] / warm_wall["median"], 2),
        "goal": {"min": 20},
        "detail": {
            "full_refresh_engine_seconds": warm_full_wall,
            "incremental_engine_seconds": warm_wall,
            "ratio_cold": round(cold_wall["median"] / incremental_wall["median"], 2),
            "full_refresh_cold_seconds": cold_wall,
            "incremental_cold_seconds": incremental_wall,
            "ratio_cold_full_over_engine_increment": round(cold_wall["median"] / warm_wall["median"], 2),
            "engine_start_seconds": engine_start,
            "engine_warm_up_runs": WARM_UP_RUNS,
            "runs_on_the_engine": on_engine([*warm, *full_warm]),
            "full_refresh_cold_phases_median": median_phases(full_cold),
            "full_refresh_engine_phases_median": median_phases(full_warm),
            "incremental_engine_phases_median": median_phases(warm),
            "full_refresh_cold_peak_rss_mb": spread([r.peak_rss_mb for r in full_cold], 0),
            "driver_jit": {"full_refresh_cold": driver_jit(full_cold), "incremental_cold": driver_jit(incremental)},
            "incremental_full_jit_seconds": full_jit_wall,
            "incremental_full_jit_phases_median": median_phases(full_jit),
            "quick_jit_speedup": round(full_jit_wall["median"] / incremental_wall["median"], 3),
            "checked_against_reference": ["full refresh cold", "full refresh on the engine", "increment on the engine"],
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
        check("B3 millpond", lake / data.LANDING, millpond_tables(lake, ("bronze", "quarantine")))
        check("B3 plain Spark", lake / data.LANDING, {"bronze": target})
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
            "quarantine split; the plain job drops malformed lines (a corrupt-record column) and keeps no quarantine",
            "checked_against_reference": {"millpond": ["bronze", "quarantine"], "plain_spark": ["bronze"]},
        },
    }


def b4_vs_plain_spark(bench: Bench) -> dict:
    """Bronze + silver + gold.device_counts ÷ a plain Spark batch job doing the same work; DuckDB as a reference."""
    files = bench.files[: bench.scale.b3_files]
    tables = ("bronze.activity", "silver.activity", "gold.device_counts")
    ours, duck, plain = [], [], []
    for rep in range(bench.scale.repeats):
        lake = bench.fresh_lake("duckdb-compare", files)
        landing = lake / data.LANDING
        ours.append(run_millpond(lake, "--tables", ",".join(tables), "--run-id", f"bench-b4-{rep}"))
        output = bench.lake("plain-spark-pipeline")
        shutil.rmtree(output, ignore_errors=True)
        plain.append(measure([sys.executable, "-m", "bench.jobs.plain_spark_pipeline", str(landing), str(output)]))
        database = bench.lake("duckdb.db")
        database.unlink(missing_ok=True)
        duck.append(measure([sys.executable, "-m", "bench.jobs.duckdb_load", str(landing), str(database)]))
        check("B4 millpond", landing, millpond_tables(lake, ("bronze", "quarantine", "silver", "device_counts")))
        check("B4 plain Spark", landing, {t: output / t for t in ("bronze", "silver", "device_counts")})
        check("B4 DuckDB", landing, duckdb_tables(database))
    ours_s = spread([sum(r.phases[t] for t in tables) for r in ours])
    duck_s = spread([r.last_json()["seconds"] for r in duck])
    plain_s = spread([r.last_json()["seconds"] for r in plain])
    ours_wall, duck_wall, plain_wall = (spread([r.wall for r in rs]) for rs in (ours, duck, plain))
    return {
        "what": "bronze + silver (dedup, gate) + gold.device_counts seconds ÷ a plain Spark batch job doing the same "
        "three writes into Delta, on the same files; both timed from a ready session",
        "ratio": round(ours_s["median"] / plain_s["median"], 2),
        "goal": {"max": 1.5},
        "detail": {
            "files": len(files),
            "mb": round(data.size_bytes(files) / 2**20, 1),
            "ours_seconds": ours_s,
            "plain_spark_seconds": plain_s,
            "duckdb_seconds": duck_s,
            "ours_phases_median": median_phases(ours),
            "ratio_with_start": round(ours_wall["median"] / plain_wall["median"], 2),
            "ours_wall_seconds": ours_wall,
            "plain_spark_wall_seconds": plain_wall,
            # A reference figure with no goal: what a single-process engine with a vectorised JSON reader takes.
            "ours_over_duckdb": round(ours_s["median"] / duck_s["median"], 2),
            "plain_spark_over_duckdb": round(plain_s["median"] / duck_s["median"], 2),
            "duckdb_wall_seconds": duck_wall,
            "checked_against_reference": {
                "millpond": ["bronze", "quarantine", "silver", "device_counts"],
                "plain_spark": ["bronze", "silver", "device_counts"],
                "duckdb": ["bronze", "silver", "device_counts"],
            },
        },
    }


def duckdb_tables(database: Path) -> dict[str, list[dict]]:
    import duckdb

    with duckdb.connect(str(database), read_only=True) as db:
        return {
            table: [
                dict(zip(columns, row, strict=True)) for row in db.execute(f"SELECT {select} FROM {table}").fetchall()
            ]
            for table, select, columns in (
                ("bronze", "Device, Index", ("Device", "Index")),
                ("silver", "Device, Index, Recorded_At", ("Device", "Index", "Recorded_At")),
                ("device_counts", "Device, total_recordings", ("Device", "total_recordings")),
            )
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


B8_CASES = ("first", "increment", "nothing_new")


def b8_vs_sdp(bench: Bench) -> dict:
    """The activity pipeline by millpond and by Spark Declarative Pipelines, side by side on the same landed files.

    Per mode and repeat, a fresh lake holds the 100x history: each side runs it first (`first`), then the next unit
    lands (1 %) and each side runs again (`increment`), then each side runs with nothing new (`nothing_new`); the
    side that goes first alternates by repeat. SDP reads the millpond lake's landing folder itself, so both read the
    very same bytes. Cold: a JVM per run on both sides. Warm: millpond on `millpond engine start`'s server, SDP with
    `--remote` on a Connect server started with its conf, both started before the repeats. Both sides' tables are
    checked against the reference after the first run and after the last. A mode that fails keeps the other's
    figures, and the benchmark is then not met.
    """
    timed: dict[str, dict[str, dict[str, list[Measured]]]] = {}
    started: dict[str, float] = {}
    errors: dict[str, str] = {}
    for mode in ("cold", "warm"):
        try:
            timed[mode] = b8_mode(bench, mode, started)
        except Exception as exc:
            errors[mode] = f"{type(exc).__name__}: {exc}"[:3000]
    walls = {
        mode: {
            side: {case: spread([r.wall for r in runs]) for case, runs in cases.items()}
            for side, cases in sides.items()
        }
        for mode, sides in timed.items()
    }

    def ratio(mode: str, case: str) -> float | None:
        if mode not in walls:
            return None
        return round(walls[mode]["millpond"][case]["median"] / walls[mode]["sdp"][case]["median"], 3)

    figures = {
        "increment_cold": {"ratio": ratio("cold", "increment"), "goal": {"max": 0.5}},
        "increment_warm": {"ratio": ratio("warm", "increment"), "goal": {"max": 0.25}},
        "nothing_new_cold": {"ratio": ratio("cold", "nothing_new"), "goal": {"max": 0.05}},
        "nothing_new_warm": {"ratio": ratio("warm", "nothing_new"), "goal": {"max": 0.05}},
        "first_cold": {"ratio": ratio("cold", "first")},
        "first_warm": {"ratio": ratio("warm", "first")},
    }
    warm_runs = [r for runs in timed.get("warm", {}).get("millpond", {}).values() for r in runs]
    return {
        "what": "wall seconds of millpond ÷ Spark Declarative Pipelines (`spark-pipelines run`) running the activity "
        "pipeline on the same files: the first run over the 100x history, a 1 % increment, a run with nothing new; "
        "cold (a JVM per run) and warm (millpond's engine, SDP on a running Connect server)",
        "ratio": figures["increment_warm"]["ratio"],
        "goal": figures["increment_warm"]["goal"],
        "figures": figures,
        "detail": {
            "wall_seconds": walls,
            "millpond_phases_median": {
                mode: {case: median_phases(timed[mode]["millpond"][case]) for case in B8_CASES} for mode in timed
            },
            "errors": errors,
            "server_start_seconds": started,
            "runs_on_the_engine": on_engine(warm_runs),
            "repeats": bench.scale.b8_repeats,
            "history_files": len(bench.history_100x),
            "history_mb": mb(bench.history_100x),
            "new_files": len(bench.increment),
            "new_mb": mb(bench.increment),
            "checked_against_reference": ["bronze", "silver", "device_counts", "activity_hourly"],
            "sdp_shape": "bronze a streaming table; silver and gold materialized views (recomputed in full every "
            "update, as SDP does); no quarantine table or gate (SDP has neither)",
        },
    }


def b8_mode(bench: Bench, mode: str, started: dict[str, float]) -> dict[str, dict[str, list[Measured]]]:
    """One mode of B8 (cold or warm): each repeat's three cases on both sides, checked against the reference."""
    timed: dict[str, dict[str, list[Measured]]] = {
        side: {case: [] for case in B8_CASES} for side in ("millpond", "sdp")
    }
    sdp = Sdp(bench.lake(f"sdp-{mode}"))
    with bench.engine() if mode == "warm" else _no_engine() as (remote, engine_start):
        try:
            if mode == "warm":
                sdp.prepare()
                started.update(millpond_engine=engine_start, sdp_server=round(sdp.start_server(), 2))
            for rep in range(bench.scale.b8_repeats):
                if mode == "cold":
                    sdp.prepare()
                lake = bench.fresh_lake(f"b8-{mode}", bench.history_100x)
                landing = lake / data.LANDING
                spec = sdp.project(f"b8_{mode}_{rep}", landing)
                env = {"SPARK_REMOTE": remote} if remote else {}
                order = ("millpond", "sdp") if rep % 2 == 0 else ("sdp", "millpond")
                for case in B8_CASES:
                    if case == "increment":
                        data.land(lake, bench.increment)
                    for side in order:
                        timed[side][case].append(
                            run_millpond(lake, "--run-id", f"bench-b8-{case}-{rep}", env=env)
                            if side == "millpond"
                            else sdp.run(spec)
                        )
                    if case in ("first", "nothing_new"):
                        check(f"B8 {mode} millpond after {case}", landing, millpond_tables(lake))
                        check(f"B8 {mode} SDP after {case}", landing, sdp.tables(spec))
        finally:
            sdp.stop_server()
    return timed


@contextmanager
def _no_engine() -> Iterator[tuple[str, float]]:
    yield "", 0.0


BENCHMARKS = {
    "B1": b1_history_growth,
    "B2": b2_full_reprocess,
    "B3": b3_ingest_vs_plain_spark,
    "B4": b4_vs_plain_spark,
    "B5": b5_fixed_overhead,
    "B6": b6_dag_parse,
    "B7": b7_memory,
    "B8": b8_vs_sdp,
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

    conf = [arg for key, value in spark_conf("local[2]").items() for arg in ("--conf", f"{key}={value}")]
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


def environment(scale_name: str, scale: data.Scale) -> dict:
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
        "scale_detail": vars(scale),
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
        unit = " s" if b.get("unit") == "seconds" else ""
        if "figures" in b:
            result = "; ".join(
                f"{k.replace('_', ' ')} {'failed' if f['ratio'] is None else f['ratio']}"
                for k, f in b["figures"].items()
            )
            goals = "; ".join(
                f"{k.replace('_', ' ')} {goal_text(f['goal'])}" for k, f in b["figures"].items() if "goal" in f
            )
            lines.append(f"| {name} | {b['what']} | {result} | {goals} | {'yes' if b['met'] else 'no'} |")
            continue
        lines.append(
            f"| {name} | {b['what']} | {b['ratio']}{unit} | {goal_text(b['goal'], unit)} | {'yes' if b['met'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def met(benchmark: dict) -> bool:
    """Whether a figure meets its goal; a benchmark of several figures meets its goal when each one with a goal
    does (B8), and each figure records its own `met`."""
    if "figures" in benchmark:
        for figure in benchmark["figures"].values():
            if "goal" in figure:
                figure["met"] = met(figure)
        return all(f["met"] for f in benchmark["figures"].values() if "goal" in f)
    goal, ratio = benchmark["goal"], benchmark["ratio"]
    if ratio is None:  # not measured (its mode failed): not met
        return False
    return ratio <= goal["max"] if "max" in goal else ratio >= goal["min"]


def goal_text(goal: dict, unit: str = "") -> str:
    return f"≤ {goal['max']}{unit}" if "max" in goal else f"≥ {goal['min']}{unit}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="small", choices=sorted(data.SCALES))
    parser.add_argument("--only", default="", help="comma-separated benchmarks (default: all)")
    parser.add_argument("--out", default=None, help="results file (default bench/results-<scale>.json)")
    parser.add_argument("--repeats", type=int, default=0, help="repeats of every comparison (default: the scale's)")
    args = parser.parse_args(argv)
    chosen = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHMARKS)
    out = Path(args.out or data.REPO / "bench" / f"results-{args.scale}.json")
    bench = Bench(args.scale, args.repeats)
    results = environment(args.scale, bench.scale) | {"benchmarks": {}}
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
    failed = [n for n, b in results["benchmarks"].items() if "error" in b or b.get("detail", {}).get("errors")]
    for name in failed:  # a mode of B8 that failed (a mismatch, a crash) kept the other's figures, not the exit code
        print(
            f"bench: {name} failed: {results['benchmarks'][name].get('error') or results['benchmarks'][name]['detail']['errors']}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
