"""millpond's Spark functions (jvm/) against what they replace, computed another way, line by line.

Bronze parses each json line with `millpond_parse_json_line` (from_json's parser fed the line's bytes) and finds the
fields its schema does not name with `millpond_unknown_json_keys` (from_json's Jackson factory, values skipped), whose
values `millpond_json_fields` keeps. Here the first must give exactly from_json's row for every kind of line, and the
others exactly the keys and values Python's json module reads; then the whole parse against the standard path
(MILLPOND_JSON_FUNCTIONS=off) on hostile lines.
"""

from __future__ import annotations

import json
import os
import random

import pytest

from millpond.driver import sources

pytestmark = pytest.mark.integration

# A schema with every kind of field a spec can declare, so each of JacksonParser's converters is compared.
RICH_SCHEMA = (
    "i INT, l BIGINT, d DOUBLE, dec DECIMAL(10,2), b BOOLEAN, s STRING, t TIMESTAMP, day DATE, "
    "arr ARRAY<INT>, m MAP<STRING,INT>, st STRUCT<k: STRING, n: INT>"
)

LINES = [
    '{"i": 1, "l": 9007199254740993, "d": 1.5, "dec": 12.345, "b": true, "s": "x", "t": "2026-11-01T10:00:00Z", '
    '"day": "2026-11-01", "arr": [1, 2], "m": {"a": 1}, "st": {"k": "v", "n": 2}}',
    '{"i": "12"}',
    '{"i": 1.0}',
    '{"i": 3000000000}',
    '{"i": 007}',
    '{"l": -1e3}',
    '{"d": "NaN"}',
    '{"d": NaN}',
    '{"d": Infinity}',
    '{"d": "1.5"}',
    '{"dec": 123456789012.5}',
    '{"b": "true"}',
    '{"b": 1}',
    '{"s": 5}',
    '{"s": {"nested": [1, 2]}}',
    '{"s": null}',
    '{"t": "2026-11-01 10:00:00"}',
    '{"t": 1700000000}',
    '{"t": "01/11/2026 10:00"}',
    '{"t": "not a time"}',
    '{"day": "2026-13-01"}',
    '{"arr": [1, "x", 3]}',
    '{"arr": 5}',
    '{"m": {"a": "b"}}',
    '{"st": {"k": 1, "n": "2", "extra": true}}',
    '{"st": []}',
    '{"s": "caf\\u00e9 \\ud83d\\ude00"}',
    '{"s": "café 😀 \u2028"}',
    '{"S": "case"}',
    '{"s": "a", "s": "b"}',
    '{"unknown": 1}',
    "{}",
    '  {"i": 2}\t',
    '{"i": 1} trailing',
    '{"i": 1}{"i": 2}',
    '[{"i": 1}]',
    "[]",
    "1",
    '"a string"',
    "null",
    "true",
    '{"i": 1,}',
    '{"i": }',
    '{"i": 1',
    '{"s": "unterminated}',
    "{'s': 'single'}",
    "{s: 1}",
    '{"i": 1 /* note */}',
    '{"s": "tab\there"}',
    '{"s": "\\x41"}',
    "not json",
    '\ufeff{"i": 9}',
    '\x00{"i": 1}',
    '{\x00"i": 1}',
    '{"i"\x00: 1}',
    "{" + '"s": "' + "é" * 3000 + '"}',
    '{"st": ' * 40 + "1" + "}" * 40,
]
OPTION_SETS = [
    {},
    {"allowComments": "true", "allowSingleQuotes": "false"},
    {"timestampFormat": "dd/MM/yyyy HH:mm"},
    {"allowNonNumericNumbers": "false", "allowUnquotedFieldNames": "true"},
]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(o) or "defaults")
def test_parsing_a_lines_bytes_gives_from_json_s_row_for_every_kind_of_line(spark, options):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(RICH_SCHEMA).add("_corrupt_record", "string")
    with_corrupt = {**options, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    lines = spark.createDataFrame(list(enumerate(LINES)), "id INT, text STRING")
    ours = lines.select("id", sources.parse_json_line(F.col("text"), schema, with_corrupt, spark).alias("row"))
    from_json = lines.select("id", F.from_json("text", schema, with_corrupt).alias("row"))
    # Compared as JSON text (a map column cannot be compared directly): every field, nulls and NaN included.
    both = ours.select("id", F.to_json("row").alias("ours")).join(
        from_json.select("id", F.to_json("row").alias("from_json")), "id"
    )
    differ = both.where(~F.col("ours").eqNullSafe(F.col("from_json"))).orderBy("id").collect()
    assert [(LINES[r.id], r.ours, r.from_json) for r in differ] == []
    assert both.count() == len(LINES)
    corrupt = ours.where(F.col("row._corrupt_record").isNotNull() | F.col("row").isNull()).count()
    assert 10 < corrupt < len(LINES) - 10  # both kinds of line were compared


def test_a_line_of_invalid_utf8_is_a_corrupt_record_not_a_failed_task(spark):
    """The one difference from from_json, which reads bad bytes as U+FFFD and may accept the line. Bronze never parses
    such a line: `_error` says "invalid UTF-8" first (sources.parse_json_lines)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL("s STRING, i INT").add("_corrupt_record", "string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    lines = [b'{"s":"\x80\xff"}', b'{"s":"\xe2\x82"}', b"\xc0\xaf{}", b'{"i"\xa0:1}', '{"s":"é"}'.encode()]
    frame = spark.createDataFrame([(i, line.hex()) for i, line in enumerate(lines)], "id INT, hex STRING")
    text = frame.select("id", F.unhex("hex").cast("string").alias("text"))

    def fields(parsed):  # the corrupt record as hex: a Connect client's Arrow collect refuses invalid UTF-8 text
        return parsed.select("id", "row.s", "row.i", F.hex("row._corrupt_record").alias("corrupt")).orderBy("id")

    ours = fields(text.select("id", sources.parse_json_line(F.col("text"), schema, options, spark).alias("row")))
    theirs = fields(text.select("id", F.from_json("text", schema, options).alias("row")))
    for line, row, from_json in zip(lines, ours.collect(), theirs.collect(), strict=True):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            assert row.s is None and bytes.fromhex(row.corrupt) == line, line
        else:
            assert row == from_json and row.s == "é"


KNOWN = ["Device", "Index", "x"]


def DEFAULTS():  # noqa: N802 - reads as the constant it stands for: Spark's default json options, as a map column
    from pyspark.sql import functions as F

    return F.create_map().cast("map<string,string>")


def key_cases(seed: int, count: int) -> list[str]:
    """JSON object lines as different writers emit them: spacing, escapes (ensure_ascii), nesting, key order."""
    rng = random.Random(seed)
    alphabet = ["Device", "Index", "x", "y", "é", 'a"b', "back\\slash", "new\nline", "dévice", "x y", "😀", "{", ":"]
    values = [1, 2.5, "s", '":"', 'a\\"b:', None, True, [1, {"inner": 1}], {"Device": {"deep": [1]}}, "{[}]"]
    lines = []
    for _ in range(count):
        keys = rng.sample(alphabet, rng.randrange(0, 6))
        record = {key: rng.choice(values) for key in keys}
        separators = rng.choice([(",", ":"), (", ", ": "), (" ,\t", " :\t"), (",", " : ")])
        lines.append(json.dumps(record, ensure_ascii=rng.random() < 0.5, separators=separators))
    return lines


def test_unknown_keys_are_the_top_level_keys_python_reads_minus_the_schema_s(spark):
    from pyspark.sql import functions as F

    lines = key_cases(seed=7, count=400) + ['{"dev\\u0069ce": 1, "Device": 2}', '{"x": 1, "x": 2, "q": 1, "q": 2}']
    frame = spark.createDataFrame([(line,) for line in lines], "text STRING")
    names = F.array(*[F.lit(name) for name in KNOWN])
    found = frame.select(
        "text", F.call_function("millpond_unknown_json_keys", F.col("text"), names, DEFAULTS()).alias("keys")
    )
    for row in found.collect():
        pairs = json.loads(row.text, object_pairs_hook=lambda items: items)
        expected = list(dict.fromkeys(key for key, _ in pairs if key not in KNOWN))
        assert row["keys"] == (expected or None), row.text
    assert found.where(F.col("keys").isNotNull()).count() > 300  # most lines had a new key: the check can fail


def test_unknown_keys_of_what_is_not_one_json_object(spark):
    """Not one complete JSON object: no keys (the parse quarantines such a line). After the object ends, nothing is a
    key."""
    from pyspark.sql import functions as F

    lines = ['[{"a": 1}]', "not json", '"a": 1', '{"a": 1} {"b": 2}', '{"a": "unterminated', '{"a": 1', "", None]
    frame = spark.createDataFrame([(line,) for line in lines], "text STRING")
    found = frame.select(
        F.call_function("millpond_unknown_json_keys", F.col("text"), F.array(F.lit("x")), DEFAULTS()).alias("k")
    )
    assert [r.k for r in found.collect()] == [None, None, None, ["a"], None, None, None, None]


def test_rescued_fields_are_the_values_python_reads_for_the_new_keys(spark):
    """`millpond_json_fields` (bronze's `_rescued_data`) with the key scan's new keys: the fields Python reads,
    a repeated key's last value at its first place, as JSON readers keep them."""
    from pyspark.sql import functions as F

    lines = key_cases(seed=11, count=400) + ['{"x": 1, "q": 1, "y": 2, "q": [2]}']
    frame = spark.createDataFrame([(line,) for line in lines], "text STRING")
    names = F.array(*[F.lit(name) for name in KNOWN])
    new_keys = F.call_function("millpond_unknown_json_keys", F.col("text"), names, DEFAULTS())
    found = frame.select(
        "text", F.call_function("millpond_json_fields", F.col("text"), new_keys, DEFAULTS()).alias("fields")
    )
    for row in found.collect():
        expected = {key: value for key, value in json.loads(row.text).items() if key not in KNOWN}
        got = list(json.loads(row.fields).items()) if row.fields else []
        written_keys = len(json.loads(row.fields, object_pairs_hook=lambda pairs: pairs)) if row.fields else 0
        assert (got, written_keys) == (list(expected.items()), len(expected)), row.text  # each key written once
    assert found.where(F.col("fields").isNotNull()).count() > 300  # most lines had a new key: the check can fail


def test_rescued_fields_keep_their_numbers_text_and_stay_valid_json(spark):
    """Numbers keep their text (no float rounding, no `1e3` -> `1000.0`); NaN, which JSON has no number for, becomes a
    string; what is not one JSON object, or names none of the fields, gives null."""
    from pyspark.sql import functions as F

    lines = [
        '{"a": 1.50, "b": 1e3, "c": 123456789012345678901234567890, "d": {"e" : [1, "x", null, true]}}',
        '{"a": NaN}',
        "[1]",
        "not json",
        '{"z": 1}',
        None,
    ]
    frame = spark.createDataFrame([(line,) for line in lines], "text STRING")
    wanted = F.array(*[F.lit(name) for name in "abcd"])
    found = [
        r.f
        for r in frame.select(F.call_function("millpond_json_fields", "text", wanted, DEFAULTS()).alias("f")).collect()
    ]
    assert found == [
        '{"a":1.50,"b":1e3,"c":123456789012345678901234567890,"d":{"e":[1,"x",null,true]}}',
        '{"a":"NaN"}',
        None,
        None,
        None,
        None,
    ]


# Bronze's json parse with millpond's functions (MILLPOND_JSON_FUNCTIONS=on) against Spark's built-ins (off), on
# lines written to trip a hand-made scanner. A schema with every type a spec may declare, one field NOT NULL.
HOSTILE_SCHEMA = (
    "Device STRING, Index INT NOT NULL, f FLOAT, sm SMALLINT, ti TINYINT, d DOUBLE, dec DECIMAL(10,2), "
    "b BOOLEAN, ts TIMESTAMP, ntz TIMESTAMP_NTZ, day DATE, bin BINARY, arr ARRAY<INT>, "
    "st STRUCT<k: STRING>"
)
HOSTILE_LINES = [
    "{'Device':'d1','Index':1,'extra':5}",  # single-quoted keys and values
    "{Device: 'd2', Index: 2, extra2: 'x'}",  # unquoted field names
    '{"Device": "d3", /* "fake": 1, */ "Index": 3, # "hash": 2\n "real": 1}',  # comments
    '{"Device": "he said \\"zz\\": 1", "Index": 4}',  # quoted text that looks like a key
    "{'Device': 'he said \"zz\": 1, \\'yy\\': 2', 'Index': 5}",
    '{"Device": "d\\u0031", "dev\\u0069ce2": 1, "\\u00e9t\\u00e9": "\\ud83d\\ude00", "Index": 6}',  # unicode escapes
    '{"Device": "a", "Device": "b", "q": 1, "q": 2, "Index": 7}',  # duplicate keys, known and new
    '{"Device": "n", "Index": 8, "nested": {"unknown": {"deep": [1, {"x": 2}]}}, "st": {"k": "v", "extra": 1}}',
    '{"Device": "types", "Index": 9, "f": 1.5, "sm": 300, "ti": 7, "d": 2.25, "dec": 12.34, "b": true, '
    '"ts": "2026-11-01T10:00:00Z", "ntz": "2026-11-01T10:00:00", "day": "2026-11-01", "bin": "AAEC", "arr": [1, 2], '
    '"st": {"k": "x"}}',
    '{"Index": 10, "sm": 70000, "ti": 300, "f": 1e40, "dec": 123456789012.5}',  # out of range for the type
    '{"Index": 11, "ts": "2026-11-01 10:00:00.123456789", "ntz": "2026-11-01", "day": "2026-11-01T10:00:00Z"}',
    '{"Index": 12, "ts": "11/01/2026 10:00", "day": "2026-2-30", "ntz": "not a time"}',
    '{"Index": 13, "ts": "2026-11-01 25:61:00", "day": "01/11/2026"}',  # parsed differently per time parser policy
    '{"Index": 14, "d": NaN, "f": "Infinity", "new": -Infinity, "big": 1e400}',
    '{"Device": "x"}',  # Index missing: NOT NULL
    '{"Index": 15, "new": 1.50, "n2": 1e3, "n3": 123456789012345678901234567890, "n4": [1, "x", null, true], '
    '"n5": 123456789012345678901234567890123456789012, "n6": -98765432109876543210987654321098765432109}',
    '{"Index": 16, "": 1, " ": 2, "a.b": 3, "a`b": 4}',  # odd names
    '{"Index": 17, "x": 1} {"Index": 18}',  # two objects on a line
    '{"Index": 19, "x": 1,}',  # trailing comma
    "{'Index': 20, \"mixed\": 'quotes'}",
    '{"Index": 21, "s\\"q": 1, "t\\\\": 2, "nl\\n": 3}',  # escaped quotes and backslashes in names
    '{"Index": 22, "dup": {"a": 1, "a": 2}}',  # a new nested field with a duplicate key inside
]
OPTIONS_SETS = [
    {},
    {"allowUnquotedFieldNames": "true"},
    {"allowComments": "true"},
    {"allowSingleQuotes": "false"},
    {"timestampFormat": "MM/dd/yyyy HH:mm", "dateFormat": "dd/MM/yyyy"},
]
SESSION_SETTINGS = [
    {},
    {"spark.sql.legacy.timeParserPolicy": "LEGACY"},
    {"spark.sql.legacy.timeParserPolicy": "CORRECTED"},
    {"spark.sql.ansi.enabled": "false"},
]


def bronze_rows(session, options: dict[str, str], fast: bool, monkeypatch) -> list[tuple]:
    """sources.parse_json_lines on HOSTILE_LINES, one comparable tuple per line (in line order): the typed fields as
    JSON, the raw text, the reason, the new fields and the rescued fields as Python reads them (a number's text may
    differ between the paths: 1.50 against 1.5)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    monkeypatch.setenv("MILLPOND_JSON_FUNCTIONS", "on" if fast else "off")
    schema = StructType.fromDDL(HOSTILE_SCHEMA)
    lines = session.createDataFrame(
        [(line, f"line-{i:03d}") for i, line in enumerate(HOSTILE_LINES)], f"value STRING, {sources.SOURCE_FILE} STRING"
    )
    parsed = sources.parse_json_lines(lines, schema, options)
    fields = F.to_json(F.struct(*[F.col(f"`{f.name}`") for f in schema.fields]))
    rows = (
        parsed.select(
            sources.SOURCE_FILE, fields.alias("fields"), sources.RAW, sources.ERROR, sources.NEW_FIELDS, sources.RESCUED
        )
        .orderBy(sources.SOURCE_FILE)
        .collect()
    )
    return [
        (
            r[0],
            r.fields,
            r[sources.RAW],
            r[sources.ERROR],
            r[sources.NEW_FIELDS],
            json.loads(r[sources.RESCUED]) if r[sources.RESCUED] else None,
        )
        for r in rows
    ]


def session_of_its_own(spark):
    """A session with confs of its own on the same JVM: newSession() on a local one; on the engine (make test-engine,
    SPARK_REMOTE) another Connect session, since a Connect session has no newSession()."""
    remote = os.environ.get("SPARK_REMOTE")
    return type(spark).builder.remote(remote).create() if remote else spark.newSession()


@pytest.mark.parametrize(
    "settings",
    SESSION_SETTINGS,
    ids=lambda s: ",".join(f"{k.split('.')[-1]}={v}" for k, v in s.items()) or "session-defaults",
)
@pytest.mark.parametrize("options", OPTIONS_SETS, ids=lambda o: ",".join(o) or "option-defaults")
def test_the_json_functions_give_the_standard_path_s_rows_reasons_and_rescued_fields(
    spark, settings, options, monkeypatch
):
    """Same rows, same quarantine reasons, same new fields and rescued values, line by line, for every option set
    and session setting; each setting in a session of its own in the one JVM (a parser built for one session's
    settings must never serve another's)."""
    session = session_of_its_own(spark)
    for key, value in settings.items():
        session.conf.set(key, value)
    standard = bronze_rows(session, options, fast=False, monkeypatch=monkeypatch)
    assert bronze_rows(session, options, fast=True, monkeypatch=monkeypatch) == standard
    assert any(row[3] for row in standard) and any(row[5] for row in standard)  # bad lines and rescued fields both


def test_a_single_quoted_line_s_new_field_is_rescued_on_both_paths(spark, monkeypatch):
    for fast in (True, False):
        rows = {r[0]: r for r in bronze_rows(spark, {}, fast, monkeypatch)}
        device_and_index = json.loads(rows["line-000"][1])
        assert (device_and_index["Device"], device_and_index["Index"]) == ("d1", 1), fast
        assert (rows["line-000"][3], rows["line-000"][4], rows["line-000"][5]) == (None, ["extra"], {"extra": 5}), fast
        assert rows["line-004"][5] is None and json.loads(rows["line-004"][1])["Device"] == "he said \"zz\": 1, 'yy': 2"


def test_two_sessions_with_different_time_parser_policies_interleaved_in_one_jvm(spark, monkeypatch):
    """The parser's settings come from the session running the query, even when the other session's query ran on
    the same threads just before (the cache was once keyed on schema and options only)."""
    legacy, corrected = session_of_its_own(spark), session_of_its_own(spark)
    legacy.conf.set("spark.sql.legacy.timeParserPolicy", "LEGACY")
    corrected.conf.set("spark.sql.legacy.timeParserPolicy", "CORRECTED")
    options = OPTIONS_SETS[-1]
    expected = {
        name: bronze_rows(session, options, False, monkeypatch)
        for name, session in (("legacy", legacy), ("corrected", corrected))
    }
    assert expected["legacy"] != expected["corrected"]  # the policies parse some line differently: the test can fail
    for name, session in [("legacy", legacy), ("corrected", corrected)] * 2:
        assert bronze_rows(session, options, True, monkeypatch) == expected[name], name
