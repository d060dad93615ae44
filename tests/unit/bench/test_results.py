"""The benchmark harness's bookkeeping, without Spark: goals judged per figure, the table it writes, and the check
that refuses a side whose tables differ from the reference (docs/benchmarks.md)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from bench.check import Mismatch, check
from bench.run import markdown, met
from millpond.dev.sample_data import activity_files
from tests.support.reference import activity_keys, activity_reference

pytestmark = pytest.mark.unit


def test_a_benchmark_of_several_figures_is_met_only_when_each_goal_is():
    b8 = {
        "what": "millpond ÷ SDP",
        "ratio": 0.2,
        "goal": {"max": 0.25},
        "figures": {
            "increment_cold": {"ratio": 0.4, "goal": {"max": 0.5}},
            "increment_warm": {"ratio": 0.2, "goal": {"max": 0.25}},
            "nothing_new_cold": {"ratio": 0.07, "goal": {"max": 0.05}},
            "first_cold": {"ratio": 1.3},  # reported, no goal
        },
    }
    assert met(b8) is False
    assert [f.get("met") for f in b8["figures"].values()] == [True, True, False, None]
    b8["figures"]["nothing_new_cold"]["ratio"] = 0.01
    assert met(b8) is True
    assert met({"ratio": 21, "goal": {"min": 20}}) and not met({"ratio": 1.6, "goal": {"max": 1.5}})


def test_the_table_lists_each_figure_and_its_goal():
    results = {
        "scale": "tiny",
        "date": "2026-11-26T12:00:00+00:00",
        "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 8},
        "versions": {"pyspark": "4.2.0"},
        "benchmarks": {
            "B4": {"what": "ours ÷ plain Spark", "ratio": 1.4, "goal": {"max": 1.5}},
            "B8": {
                "what": "millpond ÷ SDP",
                "ratio": 0.2,
                "goal": {"max": 0.25},
                "figures": {"increment_warm": {"ratio": 0.2, "goal": {"max": 0.25}}, "first_cold": {"ratio": 1.3}},
            },
        },
    }
    for b in results["benchmarks"].values():
        b["met"] = met(b)
    table = markdown(results)
    assert "| B4 | ours ÷ plain Spark | 1.4 | ≤ 1.5 | yes |" in table
    assert "| B8 | millpond ÷ SDP | increment warm 0.2; first cold 1.3 | increment warm ≤ 0.25 | yes |" in table


def test_a_side_whose_table_lacks_a_row_or_repeats_one_fails_the_check(tmp_path):
    landing = tmp_path / "landing"
    activity_files(landing, 2, 50, duplicates=0.05, malformed=0.02, seed=7)
    reference = activity_reference(landing)
    counts = sorted(reference.device_counts.items())
    good = tmp_path / "good"
    write_deltalake(str(good), pa.table({"Device": [d for d, _ in counts], "total_recordings": [c for _, c in counts]}))
    assert check("ok side", landing, {"device_counts": good}) == {"device_counts": len(counts)}
    short = tmp_path / "short"
    write_deltalake(
        str(short), pa.table({"Device": [d for d, _ in counts[1:]], "total_recordings": [c for _, c in counts[1:]]})
    )
    with pytest.raises(Mismatch, match="short side: device_counts"):
        check("short side", landing, {"device_counts": short})
    keys = sorted(reference.silver)
    with pytest.raises(Mismatch, match="duplicate keys"):
        check(
            "dup side",
            landing,
            {"silver": [dict(zip(("Device", "Index", "Recorded_At"), k, strict=True)) for k in [*keys, keys[0]]]},
        )


def test_the_keys_the_check_uses_are_the_references_and_a_bronze_with_an_extra_row_fails(tmp_path):
    landing = tmp_path / "landing"
    activity_files(landing, 3, 80, duplicates=0.1, malformed=0.05, seed=11)
    reference, keys = activity_reference(landing), activity_keys(landing)
    assert (keys.lines, keys.quarantined, keys.device_counts, keys.hourly) == (
        reference.lines,
        reference.quarantined,
        reference.device_counts,
        reference.hourly,
    )
    assert keys.bronze == Counter((r.get("Device"), r.get("Index")) for r in reference.bronze)
    assert keys.silver == set(reference.silver)
    bronze = [{"Device": r.get("Device"), "Index": r.get("Index")} for r in reference.bronze]
    assert check("ok side", landing, {"bronze": bronze}) == {"bronze": len(bronze)}
    with pytest.raises(Mismatch, match=r"extra side: bronze .* \(1 extra\)"):
        check("extra side", landing, {"bronze": [*bronze, bronze[0]]})


ODD_LINES = [  # well formed or not by the schema's types; each has a key of its own
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 9223372036854775808}',  # beyond a long
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 9223372036854775807}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": true}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 4.0}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": 7, "Index": 5}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 6, "y": "1.0"}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 7, "z": false}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 8, "x": 3}',
    '{"Recorded_At": "not a time", "Device": "odd", "Index": 9}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 10, "gt": {"a": 1}}',
    '{"Recorded_At": "2026-11-01T00:05:00Z", "Device": "odd", "Index": 11, "User": ["a"]}',
    '{"Recorded_At": null, "Device": null, "Index": null, "x": null, "gt": null}',
    "{}",
]


def test_duckdbs_tables_leave_out_the_lines_sparks_typed_parse_rejects_as_the_reference_does(tmp_path):
    """B4's DuckDB side is checked like the others: with read_json's ignore_errors a wrongly typed field became NULL
    in a kept row (1219 extra bronze rows at the large scale). The bench's five kinds of malformed line are landed
    here, and hand-written lines of each field's wrong and right types."""
    import subprocess
    import sys

    from bench.run import duckdb_tables

    landing = tmp_path / "landing"
    activity_files(landing, 3, 200, duplicates=0.1, malformed=0.2, seed=5)
    (landing / "activity-odd.json").write_text("\n".join(ODD_LINES) + "\n")
    database = tmp_path / "duck.db"
    subprocess.run([sys.executable, "-m", "bench.jobs.duckdb_load", str(landing), str(database)], check=True)
    reference = activity_reference(landing)
    assert reference.quarantined >= 20 + 9  # the bench's kinds and the odd lines that are malformed
    checked = check("DuckDB", landing, duckdb_tables(database))
    assert checked["bronze"] == len(reference.bronze) and checked["device_counts"] > 0
