"""A table's `cdc:` block: loaded with Lakeflow's defaults, and every combination a change feed cannot honour refused
before Spark starts, naming the field and the fix."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from millpond.lake import checkpoints, paths
from millpond.spec import Cdc, SpecError, load_pipeline
from millpond.spec.reprocess import parse_interval, plan_reprocess
from tests.support.cdc_reference import SCD1, SCD2, SPEC, delta_source_spec

pytestmark = pytest.mark.unit


def load(tmp_path: Path, mutate=None):
    spec = copy.deepcopy(SPEC)
    if mutate:
        mutate(spec)
    path = tmp_path / "customers.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_pipeline(path, lake_root=tmp_path / "lake")


def problems(tmp_path: Path, mutate) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load(tmp_path, mutate)
    lines = str(caught.value).splitlines()
    assert all("Fix:" in line for line in lines if line.strip()), lines
    return lines


def test_the_cdc_blocks_load_with_their_defaults_and_the_table_s_keys_are_the_feed_s(tmp_path):
    pipeline = load(tmp_path)
    assert pipeline.tables[SCD1].cdc == Cdc(
        keys=("id",),
        sequence_by=("seq", "tie"),
        apply_as_deletes="op = 'D'",
        except_columns=("op", "_source_file", "_ingested_at", "_rescued_data"),
    )
    assert pipeline.tables[SCD1].keys == ("id",)
    history = pipeline.tables[SCD2].cdc
    assert (history.scd_type, history.columns, history.track_history_columns) == (
        2,
        ("id", "email", "name"),
        ("email",),
    )


def cdc_of(table_id: str, **changes):
    def mutate(spec):
        spec["tables"][table_id]["cdc"].update(changes)

    return mutate


def table_of(table_id: str, **changes):
    def mutate(spec):
        spec["tables"][table_id].update(changes)

    return mutate


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (cdc_of(SCD1, scd_type=3), "cdc.scd_type", "is not 1 or 2"),
        (cdc_of(SCD1, track_history_columns=["email"]), "cdc.track_history_columns", "only an SCD 2 table"),
        (cdc_of(SCD2, except_columns=["op"]), "cdc", "both columns and except_columns"),
        (cdc_of(SCD2, columns=["id", "name"]), "cdc.columns", "['email'] must be kept"),
        (cdc_of(SCD1, except_columns=["id"]), "cdc.except_columns", "'id' is a key"),
        (cdc_of(SCD2, track_history_columns=["id"]), "cdc.track_history_columns", "are keys"),
        (cdc_of(SCD1, keys=[]), "cdc.keys", "no column is given"),
        (cdc_of(SCD1, sequence_by=["__START_AT"]), "cdc", "names the table's own columns take"),
        (cdc_of(SCD1, apply_as_deletes=""), "cdc.apply_as_deletes", "is not a SQL predicate"),
        (cdc_of(SCD1, scd_types=2), "cdc.scd_types", "did you mean 'scd_type'?"),
        (table_of(SCD1, output_mode="complete"), "output_mode", "runs in append mode, not complete"),
        (table_of(SCD1, keys=["name"]), "keys", "differ from cdc.keys"),
        (table_of(SCD1, expectations="customers.silver.customers"), "expectations", "cannot have this too"),
        (
            table_of(SCD1, watermark={"column": "seq", "delay": "1 hour"}, dedup={"keys": ["id"]}),
            "dedup",
            "cannot have this too",
        ),
        (table_of(SCD1, sink={"format": "parquet"}), "sink", "only a Delta table takes"),
        (table_of("bronze.customer_changes", cdc={"keys": ["id"], "sequence_by": "seq"}), "cdc", "keeps every record"),
    ],
)
def test_what_a_change_feed_cannot_honour_is_refused_with_the_field_and_fix(tmp_path, mutate, field, message):
    lines = problems(tmp_path, mutate)
    table = next(t for t in SPEC["tables"] if f"tables.{t}.{field}:" in "\n".join(lines))
    assert any(message in line for line in lines if f"tables.{table}.{field}:" in line), lines


def test_a_reprocess_of_a_cdc_table_is_refused_naming_why_and_the_full_refresh(tmp_path):
    pipeline = load(tmp_path)
    with pytest.raises(SpecError) as caught:
        plan_reprocess(pipeline, [SCD1], parse_interval("2026-11-01T00:00:00Z/2026-11-01T01:00:00Z"))
    assert f"{SCD1} cannot be reprocessed: a change feed's state" in str(caught.value)
    assert f"--full-refresh {SCD1}" in str(caught.value)


@pytest.mark.parametrize(
    ("reader", "offers_the_feed"),
    [
        (
            {
                "from": SCD1,
                "output_mode": "complete",
                "aggregate": {"group_by": [], "measures": {"customers": "count(*)"}},
            },
            False,  # an aggregate cannot apply a change feed
        ),
        ({"from": SCD1}, True),
        ({"from": SCD2}, False),  # an SCD 2 table's feed is refused
    ],
)
def test_a_table_reading_a_cdc_table_is_refused_naming_what_to_read_instead(tmp_path, reader, offers_the_feed):
    def reads_cdc_table(spec):
        spec["tables"]["gold.customer_view"] = reader

    lines = problems(tmp_path, reads_cdc_table)
    (refusal,) = [line for line in lines if "tables.gold.customer_view.from:" in line]
    assert f"{reader['from']} applies a change feed" in refusal
    assert "read bronze.customer_changes (the events" in refusal
    assert ("apply its change data feed in a table with 'cdc: {change_feed: true, keys: ['id']}'" in refusal) is (
        offers_the_feed
    )


def reads_feed_of(upstream: str, **cdc):
    def mutate(spec):
        spec["tables"]["silver.customer_mirror"] = {
            "from": upstream,
            "cdc": {"change_feed": True, "keys": ["id"], **cdc},
        }

    return mutate


def test_a_change_feed_is_read_by_commit_version_with_delta_s_deletes_and_its_columns_left_out(tmp_path):
    mirror = load(tmp_path, reads_feed_of(SCD1)).tables["silver.customer_mirror"].cdc
    assert (mirror.sequence_by, mirror.apply_as_deletes, mirror.except_columns, mirror.change_feed) == (
        ("_commit_version",),
        "_change_type = 'delete'",
        ("_change_type", "_commit_version", "_commit_timestamp"),
        True,
    )
    named = load(tmp_path, reads_feed_of(SCD1, sequence_by="_COMMIT_VERSION", columns=["id", "email"]))
    named_cdc = named.tables["silver.customer_mirror"].cdc
    assert (named_cdc.sequence_by, named_cdc.except_columns) == (("_COMMIT_VERSION",), ())  # `columns` keeps those
    also_left_out = load(tmp_path, reads_feed_of(SCD1, except_columns=["name", "_change_type"]))
    assert also_left_out.tables["silver.customer_mirror"].cdc.except_columns == (
        "name",
        "_change_type",
        "_commit_version",
        "_commit_timestamp",
    )


def test_a_sequence_is_required_unless_the_change_feed_gives_it(tmp_path):
    def no_sequence(spec):
        del spec["tables"][SCD1]["cdc"]["sequence_by"]

    lines = problems(tmp_path, no_sequence)
    assert any(f"tables.{SCD1}.cdc.sequence_by: required field is missing" in line for line in lines), lines


@pytest.mark.parametrize(
    ("upstream", "add", "message"),
    [
        (SCD2, None, "keeps one row per version (SCD 2)"),
        (
            "silver.customer_counts",
            {
                "from": "bronze.customer_changes",
                "output_mode": "update",
                "watermark": {"column": "_ingested_at", "delay": "1 hour"},
                "aggregate": {"group_by": ["id"], "measures": {"n": "count(*)"}},
            },
            "is MERGEd from an aggregate or stateful function",
        ),
        ("bronze.customer_changes", None, "only appends rows"),
        (
            "gold.customer_count",
            {"from": SCD1, "output_mode": "complete", "aggregate": {"group_by": ["id"], "measures": {"n": "count(*)"}}},
            "is rewritten whole by each batch",
        ),
    ],
)
def test_a_change_feed_is_read_only_from_a_table_updated_in_place_one_row_per_key(tmp_path, upstream, add, message):
    def mutate(spec):
        if add:
            spec["tables"][upstream] = add
        reads_feed_of(upstream)(spec)

    lines = problems(tmp_path, mutate)
    assert any("tables.silver.customer_mirror.cdc.change_feed:" in line and message in line for line in lines), lines


def test_a_join_with_a_cdc_table_is_refused_and_offers_no_change_feed(tmp_path):
    def joins(spec):
        spec["tables"]["silver.orders"] = {
            "from": "bronze.customer_changes",
            "watermark": {"column": "_ingested_at", "delay": "1 hour"},
            "join": {"with": SCD1, "using": ["id"], "watermark": "1 hour", "time_range": "1 hour"},
        }

    lines = problems(tmp_path, joins)
    (refusal,) = [line for line in lines if "tables.silver.orders.join.with:" in line]
    assert "silver.customers applies a change feed" in refusal and "change_feed" not in refusal


def test_scd_type_true_is_no_scd_type(tmp_path):
    lines = problems(tmp_path, cdc_of(SCD1, scd_type=True))
    assert any("cdc.scd_type: True is not 1 or 2" in line for line in lines), lines


@pytest.mark.parametrize(
    "change",
    [
        {"sequence_by": "seq"},
        {"apply_as_deletes": "op IN ('D', 'X')"},
        {"scd_type": 2},
        {"keys": ["id", "name"]},
    ],
)
def test_a_changed_cdc_block_is_a_change_the_checkpoint_cannot_follow(tmp_path, change):
    """The change store holds events by the old keys, sequence and delete rule: the run asks for a full refresh."""

    before = load(tmp_path).tables[SCD1]
    (tmp_path / checkpoints.SHAPE_FILE).write_text(json.dumps(checkpoints.shape(before)))
    assert checkpoints.shape_changes(tmp_path, before) == []
    after = load(tmp_path, cdc_of(SCD1, **change)).tables[SCD1]
    changes = checkpoints.shape_changes(tmp_path, after)
    assert len(changes) == 1 and changes[0].startswith("cdc: "), changes


def test_a_checkpoint_recorded_before_change_feed_existed_still_follows_its_table(tmp_path):
    """Shapes recorded by CDC tables before `change_feed` was a field lack it: they read the appended rows."""

    table = load(tmp_path).tables[SCD1]
    recorded = checkpoints.shape(table)
    del recorded["cdc"]["change_feed"]
    (tmp_path / checkpoints.SHAPE_FILE).write_text(json.dumps(recorded))
    assert checkpoints.shape_changes(tmp_path, table) == []


@pytest.mark.parametrize(
    ("cdc", "field", "message"),
    [
        ({"keys": ["email"]}, "cdc.keys", "['email'] are not the keys of silver.customers, ['id']"),
        ({"keys": ["id", "email"]}, "cdc.keys", "are not the keys of silver.customers"),
        # a delete carries the deleted row's values: its seq would be the row's own, a clash
        ({"sequence_by": ["seq", "tie"]}, "cdc.sequence_by", "a change data feed is applied in commit order"),
    ],
)
def test_a_change_feed_is_applied_on_its_upstream_s_keys_in_commit_order(tmp_path, cdc, field, message):
    lines = problems(tmp_path, reads_feed_of(SCD1, **cdc))
    assert any(f"tables.silver.customer_mirror.{field}:" in line and message in line for line in lines), lines


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "transform",
            {"sql": "SELECT * FROM source WHERE name = 'x'"},
            "a filter would keep a row whose update it drops",
        ),
        ("rate_limit", {"max_files_per_trigger": 1}, "its delete and insert of one key must meet in one batch"),
    ],
)
def test_a_change_feed_reader_has_no_transform_nor_rate_limit(tmp_path, field, value, message):
    def mutated(spec):
        reads_feed_of(SCD1)(spec)
        spec["tables"]["silver.customer_mirror"][field] = value

    lines = problems(tmp_path, mutated)
    assert any(f"tables.silver.customer_mirror.{field}:" in line and message in line for line in lines), lines


def test_a_change_feed_reader_on_the_upstream_s_keys_in_another_case_loads(tmp_path):
    mirror = load(tmp_path, reads_feed_of(SCD1, keys=["ID"])).tables["silver.customer_mirror"]
    assert mirror.reads_change_feed(SCD1) and not mirror.reads_change_feed("bronze.customer_changes")


def test_another_job_s_delta_table_loads_as_a_delta_source_its_change_feed_reader_reads(tmp_path):
    path = delta_source_spec(tmp_path, cdc={"change_feed": True, "keys": ["id"]})
    pipeline = load_pipeline(path, lake_root=tmp_path / "lake")
    source = pipeline.sources["delta.crm"]
    assert (type(source).__name__, source.path) == ("DeltaSource", "crm/customers")
    mirror = pipeline.tables["silver.crm_mirror"]
    assert mirror.reads_delta_source and not mirror.reads_source and mirror.reads_change_feed("delta.crm")
    assert str(paths.upstream_path(pipeline, "delta.crm", tmp_path / "lake")) == str(tmp_path / "lake/crm/customers")


@pytest.mark.parametrize(
    ("table", "field", "message", "fix"),
    [
        (
            {},
            "tables.silver.crm_mirror.from",
            "delta.crm is a Delta table another job writes: millpond streams only its change data feed",
            "add 'cdc: {keys: [...], change_feed: true}' to silver.crm_mirror",
        ),
        (
            {"cdc": {"keys": ["id"], "sequence_by": "seq"}},
            "tables.silver.crm_mirror.from",
            "delta.crm is a Delta table another job writes",
            "or declare sources.crm 'static: true' and look it up as a dimension",
        ),
    ],
)
def test_a_delta_source_is_read_only_as_a_change_feed(tmp_path, table, field, message, fix):
    with pytest.raises(SpecError) as caught:
        load_pipeline(delta_source_spec(tmp_path, **table), lake_root=tmp_path / "lake")
    assert f"{field}: {message}" in str(caught.value) and fix in str(caught.value)


def test_a_delta_source_with_a_file_source_s_fields_or_outside_the_lake_is_refused(tmp_path):
    path = delta_source_spec(tmp_path, cdc={"change_feed": True, "keys": ["id"]})
    spec = yaml.safe_load(path.read_text())
    spec["sources"]["crm"].update(schema="id INT", path="/elsewhere/customers")
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as caught:
        load_pipeline(path, lake_root=tmp_path / "lake")
    said = str(caught.value)
    assert "sources.crm.schema: without 'static: true' a delta source is another job's table" in said
    assert "add 'static: true' to read the table whole as a dimension" in said
    assert "sources.crm.path: '/elsewhere/customers' is absolute" in said


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("./silver//crm_mirror/", "silver/crm_mirror is silver.crm_mirror, a table of this pipeline"),
        ("silver/crm_mirror_quarantine", "silver/crm_mirror_quarantine is silver.crm_mirror's quarantine, a table of"),
        ("crm/..", "the lake root itself is no Delta table"),
        ("_checkpoints/crm", "_checkpoints/crm is millpond's or Delta's own bookkeeping"),
        ("s3a://other/crm", "'s3a://other/crm' is absolute"),
        ("", "the lake root itself is no Delta table"),
    ],
)
def test_a_delta_source_is_a_table_millpond_does_not_write(tmp_path, path, message):
    spec_path = delta_source_spec(tmp_path, cdc={"change_feed": True, "keys": ["id"]})
    spec = yaml.safe_load(spec_path.read_text())
    spec["sources"]["crm"]["path"] = path
    spec_path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as caught:
        load_pipeline(spec_path, lake_root=tmp_path / "lake")
    assert f"sources.crm.path: {message}" in str(caught.value)


def test_a_feed_reader_whose_source_lost_change_data_or_was_recreated_is_told_the_full_refresh(tmp_path):
    pipeline = load_pipeline(
        delta_source_spec(tmp_path, cdc={"change_feed": True, "keys": ["id"]}), lake_root=tmp_path / "lake"
    )
    mirror = pipeline.tables["silver.crm_mirror"]
    for error, says in (
        ("[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [3 , 4]", "its change data feed was off"),
        ("[DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE] The streaming query was reading", "not the table its"),
    ):
        fix = checkpoints.spark_error_fix(pipeline, mirror, error)
        assert fix and says in fix and "millpond run crm --full-refresh silver.crm_mirror" in fix, fix
