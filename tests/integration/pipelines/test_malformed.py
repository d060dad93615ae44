"""Bad landed input on real Spark + Delta: every bad record is quarantined with a reason, nothing is lost.

What one record is (millpond/driver/sources.py): a line as Spark's text source splits a file, at `\\n`, `\\r\\n` or a
lone `\\r`, minus blank lines (empty or only spaces and tabs); an empty file has none. That is NOT what
tests/support/reference.py counts (`str.splitlines()` also breaks at `\\x0b`, `\\x0c`, `\\x1c`-`\\x1e`, `\\x85`, `\\u2028`,
`\\u2029`, and `str.strip()` calls those blank), so the counts here come from `spark_records` below, and
`test_python_and_spark_disagree_on_lines` shows the difference instead of hiding it.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
from pathlib import Path

import pytest
import yaml

from millpond.dev.sample_data import activity_files
from millpond.driver import runner
from millpond.driver.file_formats.columns import RAW_KEEP_CHARS
from millpond.driver.sources import MAX_LINE_BYTES
from millpond.lake import paths
from millpond.lake.delta_log import latest_version
from tests.support import REPO
from tests.support.lake_tables import read

pytestmark = pytest.mark.integration

TEN_MB = 10 * 1024 * 1024


def spark_records(path: Path) -> int:
    """Records in a landed json file, by the rule in this module's docstring."""
    pieces = re.split(rb"\r\n|\r|\n", path.read_bytes())
    return sum(1 for piece in pieces if piece.strip(b" \t"))


def use_spec(tmp_path: Path, monkeypatch, spec: dict) -> None:
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    (folder / f"{spec['pipeline']}.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(folder))


def quarantine(spark, table_id: str) -> list:
    return spark.read.format("delta").load(str(paths.quarantine_path(table_id))).collect()


def good(index: int, **extra) -> str:
    return json.dumps(
        {
            "Recorded_At": "2026-11-01T00:00:01.000Z",
            "Device": f"d{index}",
            "Index": index,
            "x": 1.0,
            "y": 2.0,
            "z": 3.0,
            **extra,
        }
    )


def binary_bytes(seed: int) -> bytes:
    """Random bytes with NULs, and a 200 KB stretch without any line break (one long invalid-UTF-8 line)."""
    rng = random.Random(seed)
    noise = bytes(rng.randrange(256) for _ in range(20_000))
    stretch = bytes(b for b in (rng.randrange(256) for _ in range(200_000)) if b not in (10, 13))
    return noise + b"\x00" * 100 + stretch + b"\n" + noise


def test_json_bad_input_variety_is_quarantined_with_reasons_and_counts_reconcile(spark, lake, tmp_path, monkeypatch):
    spec = yaml.safe_load((REPO / "pipelines" / "activity.yaml").read_text())
    # Device is required here, so a line without it is a bad record; a missing nullable field (x) is not.
    spec["sources"]["activity"]["schema"] = spec["sources"]["activity"]["schema"].replace(
        "Device STRING", "Device STRING NOT NULL"
    )
    use_spec(tmp_path, monkeypatch, spec)
    folder = lake / "landing" / "activity"
    generated = activity_files(folder, 1, 40, seed=1)[0]
    lines = {
        "truncated": good(101)[:35],
        "wrong type": good(102).replace('"x": 1.0', '"x": "fast"'),
        "missing required": json.dumps({"Index": 103, "x": 1.0}),
        "not an object": "[1, 2, 3]",
    }
    invalid_utf8 = b'{"Device": "d\xff\xfe104", "Index": 104}'
    nul_inside = '{"Device": "d105", "Index": 105, "Model": "a\\u0000b"}'  # an escaped NUL is valid JSON
    missing_optional = json.dumps({"Recorded_At": "2026-11-01T00:00:01.000Z", "Device": "d106", "Index": 106})
    line_separator = good(107, User="a\u2028b")  # U+2028 inside a string: one line for Spark, two for Python
    mixed = (
        "\n".join([good(100), *lines.values(), nul_inside, missing_optional]).encode()
        + b"\n"
        + invalid_utf8
        + b"\r"
        + good(108).encode()
        + b"\r\n\t\n   \n"
        + line_separator.encode()
        + b"\n"
    )
    (folder / "mixed.json").write_bytes(mixed)
    (folder / "empty.json").write_bytes(b"")
    (folder / "binary.json").write_bytes(binary_bytes(seed=2))
    huge_object = json.dumps({"Device": "d109", "Index": 109, "User": "u" * TEN_MB})
    garbage = "#" * TEN_MB
    (folder / "huge.json").write_text("\n".join([huge_object, garbage, good(110)]))  # no final newline either
    landed = sorted(folder.glob("*.json"))
    records = {p.name: spark_records(p) for p in landed}
    assert records["empty.json"] == 0 and records["mixed.json"] == 10 and records["huge.json"] == 3

    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "bad-input"]) == 0

    bronze = read(spark, "bronze.activity")
    bad = quarantine(spark, "bronze.activity")
    assert bronze.count() + len(bad) == sum(records.values())  # nothing lost, nothing counted twice
    kept = {r.Index: r for r in bronze.where("Index >= 100").collect()}
    assert set(kept) == {100, 105, 106, 107, 108, 110}  # the good lines among the bad ones are kept
    assert kept[105].Model == "a\x00b" and kept[106].x is None and kept[107].User == "a\u2028b"
    assert bronze.where(f"_source_file LIKE '%{generated.name}'").count() == 40
    by_file: dict[str, list] = {}
    for row in bad:
        by_file.setdefault(row.source_file.rsplit("/", 1)[-1], []).append(row)
    assert all(r.rule == "parse" and r.run_id == "bad-input" for r in bad)

    reasons = {r.raw: r.reason for r in by_file["mixed.json"]}
    assert len(reasons) == 5
    assert reasons[lines["truncated"]] == "malformed JSON (truncated or invalid syntax)"
    assert reasons[lines["wrong type"]] == "field x: expected double, got fast"
    assert reasons[lines["missing required"]] == "field Device: missing or null (declared NOT NULL)"
    assert reasons[lines["not an object"]] == "not a JSON object"
    # Invalid UTF-8: the raw keeps the line with U+FFFD for each bad byte, so it can be found in its file.
    assert reasons['{"Device": "d\ufffd\ufffd104", "Index": 104}'] == "invalid UTF-8 bytes (shown as U+FFFD in raw)"

    binary = by_file["binary.json"]
    assert len(binary) == records["binary.json"]  # every piece of the binary file is a bad record
    assert all(r.reason.startswith(("invalid UTF-8 bytes", "not a JSON object", "malformed JSON")) for r in binary)
    long_line = [r for r in binary if "raw keeps the first" in r.reason]
    assert len(long_line) == 1 and len(long_line[0].raw) == RAW_KEEP_CHARS  # the 200 KB stretch, cut to 64 K

    huge = sorted(by_file["huge.json"], key=lambda r: r.raw)
    assert len(huge) == 2  # the 10 MB object and the 10 MB garbage line; the good line after them is in bronze
    for row, size in zip(huge, (TEN_MB, len(huge_object)), strict=True):
        assert row.reason == (
            f"line too long: {size} bytes (limit {MAX_LINE_BYTES}), not parsed; raw keeps the "
            f"first {RAW_KEEP_CHARS} of {size} characters"
        )
        assert len(row.raw) == RAW_KEEP_CHARS
    assert huge[0].raw == "#" * RAW_KEEP_CHARS and huge[1].raw.startswith('{"Device": "d109"')

    log = spark.read.format("delta").load(str(paths.event_log_path())).where("run_id = 'bad-input'").collect()[0]
    assert (log.rows_in, log.rows_written, log.rows_quarantined) == (sum(records.values()), bronze.count(), len(bad))

    assert runner.main(["activity", "--tables", "bronze.activity"]) == 0  # a rerun reads nothing again
    assert read(spark, "bronze.activity").count() + len(quarantine(spark, "bronze.activity")) == sum(records.values())


def test_python_and_spark_disagree_on_lines(spark, tmp_path):
    """Why the counts above do not come from tests/support/reference.py: Python splits and blanks more characters."""
    from pyspark.sql import functions as F

    path = tmp_path / "lines.json"
    path.write_bytes(b'{"a": "x\xe2\x80\xa8y"}\n\t\n\x0b\nA\x0cB\x1cC\xc2\x85D\rE\r\nF\x00G\n')
    lines = spark.read.text(str(path)).where(F.btrim("value", F.lit(" \t")) != "")
    assert [r.value for r in lines.collect()] == ['{"a": "x\u2028y"}', "\x0b", "A\x0cB\x1cC\x85D", "E", "F\x00G"]
    assert spark_records(path) == 5
    python_lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert python_lines == ['{"a": "x', 'y"}', "A", "B", "C", "D", "E", "F\x00G"]


def test_the_quarantine_pass_filters_on_bad_line_buckets_before_parsing(spark, lake):
    """Why bronze's second read is cheap: `reread_bad_lines` prunes to the files with bad lines and filters on the
    raw text's bucket in the scan, below the parse."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from millpond.driver import sources
    from millpond.spec import load_pipeline

    source = load_pipeline("activity").sources["landing.activity"]
    folder = lake / "landing" / "activity"
    folder.mkdir(parents=True)
    wrong_type = good(2).replace('"Index": 2', '"Index": "two"')
    (folder / "bad.json").write_text(f"{good(1)}\nnot json\n{wrong_type}\n")
    (folder / "clean.json").write_text(f"{good(3)}\n{good(4)}\n")
    text = spark.read.text(str(folder)).select("value", F.col("_metadata.file_path").alias(sources.SOURCE_FILE))
    parsed = sources.parse_json_lines(text, StructType.fromDDL(source.schema), source.options)
    is_bad = F.col(sources.ERROR).isNotNull()
    found = parsed.agg(
        F.collect_set(F.when(is_bad, F.col(sources.LINE_BUCKET))).alias("buckets"),
        F.collect_set(F.when(is_bad, F.col(sources.SOURCE_FILE))).alias("files"),
    ).first()
    assert len(found.buckets) == 2 and [f.rsplit("/", 1)[-1] for f in found.files] == ["bad.json"]
    bad = sources.reread_bad_lines(spark, source, found.files, found.buckets)
    assert sorted(r[sources.RAW] for r in bad.collect()) == sorted(
        r[sources.RAW] for r in parsed.where(is_bad).collect()
    )
    printed = io.StringIO()  # the physical plan as `explain()` prints it, on a JVM of the test's own or the engine
    with contextlib.redirect_stdout(printed):
        bad.explain()
    plan = printed.getvalue().split("== Physical Plan ==", 1)[1].splitlines()
    schema_parse = "JsonLineParser.parse("  # sources.parse_json_line (the rescue's from_json is not it)
    parse = next(i for i, line in enumerate(plan) if schema_parse in line)
    pushed = next(i for i, line in enumerate(plan) if "file_path" in line and "xxhash64(value" in line)
    assert pushed > parse  # the plan prints top-down: the file and bucket filters run below the parse
    # ... while the filter on the parse's results stays above the parse: the parse runs once per line
    assert [line for line in plan if "Filter" in line and schema_parse in line] == []
    assert sum(line.count(schema_parse) for line in plan) == 1


CSV_SPEC = {
    "pipeline": "readings",
    "schedule": "@daily",
    "start_date": "2026-11-01",
    "sources": {
        "readings": {
            "format": "csv",
            "path": "landing/readings",
            "schema": "sensor STRING NOT NULL, reading DOUBLE, n INT",
        }
    },
    "tables": {"bronze.readings": {"from": "landing.readings"}},
}


def test_csv_field_counts_types_and_required_fields_get_reasons(spark, lake, tmp_path, monkeypatch):
    use_spec(tmp_path, monkeypatch, CSV_SPEC)
    folder = lake / "landing" / "readings"
    folder.mkdir(parents=True)
    data = ["a,1.5,1", '"b,quoted",2.5,2', "c,3.5", "d,4.5,4,extra", "e,not-a-number,5", ",6.5,6", "f,7.5,seven"]
    (folder / "r1.csv").write_text("sensor,reading,n\n" + "\n".join(data) + "\n\n")
    (folder / "empty.csv").write_bytes(b"")
    (folder / "header-only.csv").write_text("sensor,reading,n\n")
    assert runner.main(["readings"]) == 0
    rows = {(r.sensor, r.reading, r.n) for r in read(spark, "bronze.readings").collect()}
    assert rows == {("a", 1.5, 1), ("b,quoted", 2.5, 2)}
    reasons = {r.raw: r.reason for r in quarantine(spark, "bronze.readings")}
    assert len(rows) + len(reasons) == len(data)  # data lines: the header and blank lines are not records
    prefix = "csv line does not match the schema: "
    assert reasons == {
        "c,3.5": prefix + "too few fields (2, expected 3: sensor, reading, n)",
        "d,4.5,4,extra": prefix + "too many fields (4, expected 3: sensor, reading, n)",
        "e,not-a-number,5": prefix + "field reading: expected double, got not-a-number",
        "f,7.5,seven": prefix + "field n: expected int, got seven",
        '{"reading":6.5,"n":6}': "field sensor: missing or null (declared NOT NULL)",
    }


def quarantine_commit(version: int) -> tuple[str, int, bool]:
    """The engine of bronze.activity's quarantine commit, the batch id in its Delta `txn` action, and whether it is
    marked a blind append (it read nothing of the table, so concurrent appends never conflict with it)."""
    lines = (paths.quarantine_path("bronze.activity") / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    info = next(json.loads(line)["commitInfo"] for line in lines if "commitInfo" in line)
    engine = info.get("engineInfo") or info.get("clientVersion", "")
    batch = next(json.loads(line)["txn"]["version"] for line in lines if '"txn"' in line)
    return re.split("[/:]", engine)[0], batch, info.get("isBlindAppend")


@pytest.mark.own_jvm
def test_a_batch_with_few_short_bad_lines_quarantines_them_from_its_one_read(spark, lake, monkeypatch):
    """Up to CARRIED_BAD_LINES bad lines of at most CARRIED_RAW_BYTES ride out of the batch's one pass: the
    quarantine holds what that read saw, and no file is read again; once the quarantine exists the driver commits
    them (delta-rs), with Delta's `txn` action for the batch as Spark's writes carry it. A batch with a longer bad
    line is read again, and Spark appends to the same table."""
    from millpond.driver import sources
    from millpond.driver.sinks import landing

    folder = lake / "landing" / "activity"
    folder.mkdir(parents=True)
    bad_lines = ["not json", good(2).replace('"Index": 2', '"Index": "two"'), "[1, 2]"]
    (folder / "a.json").write_text("\n".join([good(1), bad_lines[0], good(3), bad_lines[1]]) + "\n")
    (folder / "b.json").write_text("\n".join([bad_lines[2], good(4)]) + "\n")
    reread_files = []
    reread = sources.reread_bad_lines

    def recording_reread(spark, source, files, buckets):
        reread_files.append(sorted(f.rsplit("/", 1)[-1] for f in files))
        return reread(spark, source, files, buckets)

    monkeypatch.setattr(sources, "reread_bad_lines", recording_reread)
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "carried"]) == 0
    assert reread_files == []
    assert sorted(r.Index for r in read(spark, "bronze.activity").collect()) == [1, 3, 4]
    rows = {r.raw: (r.source_file.rsplit("/", 1)[-1], r.reason, r.run_id) for r in quarantine(spark, "bronze.activity")}
    assert rows == {
        "not json": ("a.json", "not a JSON object", "carried"),
        bad_lines[1]: ("a.json", "field Index: expected bigint, got two", "carried"),
        "[1, 2]": ("b.json", "not a JSON object", "carried"),
    }
    # The quarantine's first write creates it through Spark (with the session's default table properties).
    assert quarantine_commit(0) == ("Apache-Spark", 0, True)

    long_bad = "{" + "x" * landing.CARRIED_RAW_BYTES  # one line over the carried size: the batch is read again
    (folder / "c.json").write_text("\n".join([good(5), long_bad, "still not json"]) + "\n")
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "reread"]) == 0
    assert reread_files == [["c.json"]]
    assert sorted(r.Index for r in read(spark, "bronze.activity").collect()) == [1, 3, 4, 5]
    reread_rows = {r.raw: r.reason for r in quarantine(spark, "bronze.activity") if r.run_id == "reread"}
    assert reread_rows == {
        long_bad: "malformed JSON (truncated or invalid syntax)",
        "still not json": "not a JSON object",
    }

    monkeypatch.setattr(landing, "CARRIED_BAD_LINES", 2)  # more bad lines than are carried: read again too
    (folder / "d.json").write_text("\n".join(["one", good(6), "two", "three"]) + "\n")
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "many"]) == 0
    assert reread_files == [["c.json"], ["d.json"]]
    assert sorted(r.raw for r in quarantine(spark, "bronze.activity") if r.run_id == "many") == ["one", "three", "two"]

    (folder / "e.json").write_text("\n".join(["four", good(7)]) + "\n")  # carried, onto an existing quarantine
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "onto"]) == 0
    assert reread_files == [["c.json"], ["d.json"]]
    version = latest_version(paths.quarantine_path("bronze.activity"))
    assert quarantine_commit(version) == ("delta-rs", 3, True)  # the driver's commit, with the batch's Delta `txn`
    assert [r.raw for r in quarantine(spark, "bronze.activity") if r.run_id == "onto"] == ["four"]
    assert {type(r.quarantined_at).__name__ for r in quarantine(spark, "bronze.activity")} == {"datetime"}


@pytest.mark.own_jvm
def test_a_landing_file_rewritten_mid_run_fails_the_batch_before_its_quarantine(spark, lake, monkeypatch, capsys):
    """A batch whose bad lines are not carried out of its read (here: none is, CARRIED_RAW_BYTES 0) reads them
    again from their files for the quarantine; a file rewritten in between must not put other lines there than the
    ones missing from the table."""
    from millpond.driver import sources
    from millpond.driver.sinks import landing

    monkeypatch.setattr(landing, "CARRIED_RAW_BYTES", 0)

    folder = lake / "landing" / "activity"
    folder.mkdir(parents=True)
    landed = folder / "rewritten.json"
    bad_lines = ["not json", good(3).replace('"Index": 3', '"Index": "three"')]
    original = "\n".join([good(1), bad_lines[0], good(2), bad_lines[1]]) + "\n"
    landed.write_text(original)
    reread = sources.reread_bad_lines

    def rewrite_then_reread(*args):
        landed.write_text("\n".join([good(1), good(2), bad_lines[1]]) + "\n")  # a producer rewrites it mid-run
        return reread(*args)

    monkeypatch.setattr(sources, "reread_bad_lines", rewrite_then_reread)
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "rewritten"]) == 1
    err = capsys.readouterr().err
    assert "read 2 malformed line(s) from file:" in err and "rewritten.json, but reading those files again" in err
    assert "found 1: a landing file changed or was removed while this run read it" in err
    assert "Fix: land files once and never rewrite them" in err
    assert sorted(r.Index for r in read(spark, "bronze.activity").collect()) == [1, 2]
    assert not paths.quarantine_path("bronze.activity").exists()

    monkeypatch.setattr(sources, "reread_bad_lines", reread)
    landed.write_text(original)  # put back as it was: the rerun writes the quarantine, the table stays as it is
    assert runner.main(["activity", "--tables", "bronze.activity"]) == 0
    assert sorted(r.Index for r in read(spark, "bronze.activity").collect()) == [1, 2]
    assert sorted(r.raw for r in quarantine(spark, "bronze.activity")) == sorted(bad_lines)


@pytest.mark.own_jvm
def test_bad_lines_are_read_again_from_their_own_files_whatever_their_names(spark, lake, monkeypatch, capsys):
    """The quarantine pass reads the files that held bad lines, not the whole landing folder: names with spaces,
    `%`, `#` or non-ASCII letters still give the quarantine each line with the file it came from, and a file removed
    before that read fails the batch naming it (not with Spark's PATH_NOT_FOUND). (No bad line is carried out of
    the first read here, CARRIED_RAW_BYTES 0, so every batch takes that second read.)"""
    from millpond.driver import sources
    from millpond.driver.sinks import landing

    monkeypatch.setattr(landing, "CARRIED_RAW_BYTES", 0)

    folder = lake / "landing" / "activity"
    folder.mkdir(parents=True)
    names = ["plain.json", "with space 100%.json", "hash#1 ü.json"]
    for i, name in enumerate(names):
        (folder / name).write_text("\n".join([good(i), f"not json from {name}"]) + "\n")
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "names"]) == 0
    file_of_index = {r.Index: r._source_file for r in read(spark, "bronze.activity").collect()}
    assert {r.raw: r.source_file for r in quarantine(spark, "bronze.activity")} == {
        f"not json from {name}": file_of_index[i] for i, name in enumerate(names)
    }

    gone = folder / "gone.json"
    gone.write_text("\n".join([good(9), "not json from gone.json"]) + "\n")
    reread = sources.reread_bad_lines

    def remove_then_reread(*args):
        gone.unlink()  # e.g. an archiving job moved it while the run read it
        return reread(*args)

    monkeypatch.setattr(sources, "reread_bad_lines", remove_then_reread)
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "gone"]) == 1
    err = capsys.readouterr().err
    assert "read 1 malformed line(s) from file:" in err and "gone.json, but reading those files again" in err
    assert "found 0: a landing file changed or was removed while this run read it" in err
    assert "PATH_NOT_FOUND" not in err


def test_a_landing_file_whose_name_spark_would_glob_is_refused_before_anything_is_read(spark, lake, capsys):
    """Spark's file source reads a batch's files by path and expands a glob character in one (`?` here): the batch
    then read the other files twice. The run refuses the name, naming file and fix; after the rename, once each."""
    folder = lake / "landing" / "activity"
    folder.mkdir(parents=True)
    for i, name in enumerate(["plain.json", "with space.json", "odd?.json"]):
        (folder / name).write_text(good(i) + "\n")
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "odd"]) == 1
    err = capsys.readouterr().err
    assert "landing file name(s) with a glob character" in err and str(folder / "odd?.json") in err
    assert "Fix: rename the file(s) without those characters" in err
    assert not paths.table_path("bronze.activity").exists()

    (folder / "odd?.json").rename(folder / "odd.json")
    assert runner.main(["activity", "--tables", "bronze.activity", "--run-id", "renamed"]) == 0
    assert sorted(r.Index for r in read(spark, "bronze.activity").collect()) == [0, 1, 2]
