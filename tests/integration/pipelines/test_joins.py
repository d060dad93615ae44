"""Stream-stream and stream-static joins on real Spark + Delta: the shipped `clicks` pipeline against a plain-Python
reference.

Three landed rounds of impressions and clicks run through `pipelines/clicks.yaml` (bronze for each feed, a
left_outer join in silver, a complete-mode count in gold, and hourly click-through rates per campaign in gold,
looked up in a campaigns CSV). The reference applies the README's join rules by hand: an impression and a click
pair up when their impression_id is equal and the click comes 0 to 60 minutes after the impression, whichever
round each landed in; an impression without such a click appears once, with null click columns, after the run
whose watermark (the smaller of newest impression - 2 h and newest click - 3 h) has passed its time + 60 minutes.
Each joined row takes its campaign from the dimension as it was in the run that wrote the row (the dimension
changes before the third round); an ad the dimension does not name counts as 'unattributed'.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from millpond.driver import runner
from millpond.lake import checkpoints, paths
from millpond.lake.delta_log import latest_version, rows_added
from millpond.spec import load_pipeline
from tests.support import REPO
from tests.support.lake_tables import event_log

pytestmark = pytest.mark.integration

MILLPOND = str(Path(sys.executable).parent / "millpond")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
JOINED, GOLD, CTR = "silver.impression_clicks", "gold.ad_clicks", "gold.campaign_ctr"
TABLES = ("bronze.impressions", "bronze.clicks", JOINED, GOLD, CTR)
IMPRESSION_DELAY, CLICK_DELAY, MAX_LAG = 120, 180, 60  # minutes, as pipelines/clicks.yaml says

# Per round: impressions (impression id, ad, minute after T0) and clicks (click id, impression id, minute).
ROUNDS = [
    {
        "impressions": [("i1", "ad_a", 0), ("i2", "ad_a", 10), ("i3", "ad_b", 20), ("i4", "ad_b", 30)],
        "clicks": [
            ("c1", "i1", 5),
            ("c3", "i3", 50),
            ("c2", "i2", 75),  # 65 minutes after i2: out of range, i2 stays unclicked
            ("c9", "i0", 40),
        ],
    },  # an impression nobody landed: the click pairs with nothing
    {
        "impressions": [
            ("i5", "ad_a", 200),
            ("i6", "ad_b", 225),
            ("i7", "ad_a", 240),
            ("i10", "ad_b", 150),
        ],  # never clicked: settled only by round 2's watermark
        "clicks": [
            ("c4", "i4", 80),  # i4 landed a round earlier and waited in state
            ("c5", "i5", 210),
            ("c6", "i7", 290),
        ],
    },
    {
        "impressions": [("i8", "ad_b", 400), ("i9", "ad_a", 420)],
        "clicks": [
            ("c7", "i9", 430),
            ("c8", "i6", 235),  # i6 of round 1, clicked 10 minutes later, landed a round later
            ("c10", "i8", 470),
        ],
    },  # 70 minutes: out of range, and i8 is not settled yet
]
# The campaigns dimension (ad -> campaign, advertiser) landed before each round: ad_b has no campaign at first;
# before round 3 ad_a moves to another campaign and ad_b gets one. Rows written earlier keep their campaign.
UNATTRIBUTED = "unattributed"
DIMENSIONS = [
    {"ad_a": ("spring", "acme")},
    {"ad_a": ("spring", "acme")},
    {"ad_a": ("summer", "acme"), "ad_b": ("spring", "globex")},
]


# ---------------------------------------------------------------------------------------------- the reference


def watermarks(rounds: list[dict]) -> list[int]:
    """The join's watermark after each run: the smaller of the two sides' newest event time minus their delay."""
    result, impressions, clicks = [], [], []
    for r in rounds:
        impressions += [m for *_, m in r["impressions"]]
        clicks += [m for *_, m in r["clicks"]]
        result.append(min(max(impressions) - IMPRESSION_DELAY, max(clicks) - CLICK_DELAY))
    return result


def reference(rounds: list[dict]) -> Counter:
    """The join table after the last of `rounds`: (impression id, ad, minute, click id, click minute) rows."""
    impressions = [i for r in rounds for i in r["impressions"]]
    clicks = [c for r in rounds for c in r["clicks"]]
    watermark = watermarks(rounds)[-1]
    pairs = [
        (i, ad, t, c, ct) for i, ad, t in impressions for c, ci, ct in clicks if ci == i and 0 <= ct - t <= MAX_LAG
    ]
    clicked = {p[0] for p in pairs}
    settled = [(i, ad, t, None, None) for i, ad, t in impressions if i not in clicked and t + MAX_LAG < watermark]
    return Counter(pairs + settled)


def gold_reference(rows: Counter) -> dict[str, tuple[int, int]]:
    """ad -> (clicks, impressions without click), over the join table's rows."""
    result: dict[str, list[int]] = {}
    for (_, ad, _, click, _), count in rows.items():
        counts = result.setdefault(ad, [0, 0])
        counts[0 if click else 1] += count
    return {ad: (c[0], c[1]) for ad, c in result.items()}


def ctr_reference(rounds: list[dict], dimensions: list[dict]) -> dict[tuple, tuple[int, int, float]]:
    """gold.campaign_ctr after one run per round, each row of the join table labelled with the dimension of the run
    that wrote it (the rows new in run n: the table after n+1 rounds minus the table after n)."""
    return ctr_table(
        [
            (reference(rounds[: n + 1]) - (reference(rounds[:n]) if n else Counter()), dimension)
            for n, dimension in enumerate(dimensions)
        ]
    )


def ctr_table(labelled: list[tuple[Counter, dict]]) -> dict[tuple, tuple[int, int, float]]:
    """(hour start minute, campaign, advertiser) -> (impressions, clicks, ctr) over join-table rows, each batch
    of rows looked up in its dimension; an ad the dimension does not name is 'unattributed'."""
    result: dict[tuple, list[int]] = {}
    for rows, dimension in labelled:
        for (_, ad, t, click, _), count in rows.items():
            campaign, advertiser = dimension.get(ad, (UNATTRIBUTED, UNATTRIBUTED))
            counts = result.setdefault((t // 60 * 60, campaign, advertiser), [0, 0])
            counts[0] += count
            counts[1] += count if click else 0
    return {key: (n, c, c / n) for key, (n, c) in result.items()}


def test_the_rows_exercise_what_they_were_designed_for():
    """Guard the hand-made data: cross-round pairs, settled impressions in two runs, no boundary cases, no late row."""
    assert watermarks(ROUNDS) == [-105, 110, 290]
    after = [reference(ROUNDS[: n + 1]) for n in range(len(ROUNDS))]
    unclicked = [sorted(row[0] for row in table if row[3] is None) for table in after]
    assert unclicked == [[], ["i2"], ["i10", "i2"]]
    assert ("i4", "ad_b", 30, "c4", 80) in after[1] and ("i6", "ad_b", 225, "c8", 235) in after[2]
    assert all(count == 1 for table in after for count in table.values())
    for n in range(1, len(ROUNDS)):  # each run only adds rows to the join table: gold can label them by run
        assert not reference(ROUNDS[:n]) - after[n]
    ctr = ctr_reference(ROUNDS, DIMENSIONS)
    # ad_a under its old and its new campaign, ad_b without a campaign (runs 1-2) and with one (run 3)
    assert {key[1:] for key in ctr} == {
        ("spring", "acme"),
        ("summer", "acme"),
        (UNATTRIBUTED, UNATTRIBUTED),
        ("spring", "globex"),
    }
    assert any(0 < c < 1 for _, _, c in ctr.values())
    previous = None
    for n, watermark in enumerate(watermarks(ROUNDS)):
        for _, _, t in [i for r in ROUNDS[: n + 1] for i in r["impressions"]]:
            assert abs(t + MAX_LAG - watermark) >= 5  # no impression settles on the boundary
        if previous is not None:  # nothing lands behind the watermark of the run before
            assert all(t >= previous - MAX_LAG for *_, t in ROUNDS[n]["impressions"])
            assert all(t >= previous for *_, t in ROUNDS[n]["clicks"])
        previous = watermark


# ---------------------------------------------------------------------------------------------- the lake


def stamp(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def land_dimension(lake: Path, campaigns: dict) -> None:
    """The campaigns CSV, replaced whole (hidden name, then rename), as a user edits a dimension."""
    folder = lake / "landing" / "campaigns"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".campaigns.csv.tmp"
    tmp.write_text("ad_id,campaign,advertiser\n" + "".join(f"{ad},{c},{a}\n" for ad, (c, a) in campaigns.items()))
    tmp.replace(folder / "campaigns.csv")


def land(lake: Path, round_number: int) -> None:
    """One round: an impressions file and a clicks file, each written under a hidden name and renamed; the
    campaigns dimension as it is for this round."""
    land_dimension(lake, DIMENSIONS[round_number])
    rows = ROUNDS[round_number]
    files = {
        "impressions": [
            {"impression_id": i, "ad_id": ad, "impression_time": stamp(t)} for i, ad, t in rows["impressions"]
        ],
        "clicks": [{"click_id": c, "impression_id": i, "click_time": stamp(t)} for c, i, t in rows["clicks"]],
    }
    for feed, records in files.items():
        folder = lake / "landing" / feed
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{feed}-{round_number}.tmp"
        tmp.write_text("\n".join(json.dumps(r) for r in records) + "\n")
        tmp.replace(folder / f"{feed}-{round_number}.json")


def minutes(column):
    """Minutes after T0 (fractional for the generator's millisecond times), rounded like `minutes_of`."""
    from pyspark.sql import functions as F

    return F.round((F.unix_micros(column) - int(T0.timestamp()) * 1_000_000) / 60_000_000, 6)


def minutes_of(text: str) -> float:
    return round((datetime.fromisoformat(text.replace("Z", "+00:00")) - T0).total_seconds() / 60, 6)


def read_joined(spark) -> Counter:
    df = spark.read.format("delta").load(str(paths.table_path(JOINED)))
    assert df.columns == ["impression_id", "ad_id", "impression_time", "click_id", "click_time"]
    rows = df.select("impression_id", "ad_id", minutes("impression_time"), "click_id", minutes("click_time")).collect()
    return Counter(tuple(r) for r in rows)


def read_gold(spark) -> dict[str, tuple[int, int]]:
    rows = spark.read.format("delta").load(str(paths.table_path(GOLD))).collect()
    table = {r.ad_id: (r.clicks, r.impressions_without_click) for r in rows}
    assert len(table) == len(rows), "gold holds an ad twice"
    return table


def read_ctr(spark) -> dict[tuple, tuple[int, int, float]]:
    df = spark.read.format("delta").load(str(paths.table_path(CTR)))
    assert df.columns == ["hour", "campaign", "advertiser", "impressions", "clicks", "ctr"]
    rows = df.select(minutes("hour").alias("hour"), "campaign", "advertiser", "impressions", "clicks", "ctr").collect()
    table = {(int(r.hour), r.campaign, r.advertiser): (r.impressions, r.clicks, r.ctr) for r in rows}
    assert len(table) == len(rows), "gold holds a (window, campaign) twice"
    return table


def assert_ctr(spark, rounds: list[dict], dimensions: list[dict]) -> None:
    assert read_ctr_matches(spark, ctr_reference(rounds, dimensions))


def read_ctr_matches(spark, expected: dict[tuple, tuple[int, int, float]]) -> bool:
    actual = read_ctr(spark)
    assert set(actual) == set(expected)
    for key, (impressions, clicks, ctr) in expected.items():
        assert actual[key][:2] == (impressions, clicks), key
        assert abs(actual[key][2] - ctr) < 1e-12, key
    return True


@pytest.fixture(scope="module")
def three_rounds(tmp_path_factory, spark):
    """Land and run three rounds of the shipped clicks pipeline, comparing after each; keep the lake and logs."""
    lake = tmp_path_factory.mktemp("clicks") / "lake"
    lake.mkdir()
    logs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MILLPOND_LAKE", str(lake))
        mp.delenv("MILLPOND_PIPELINES", raising=False)  # the shipped pipelines/clicks.yaml
        for round_number in range(len(ROUNDS)):
            land(lake, round_number)
            assert runner.main(["clicks", "--run-id", f"round-{round_number}"]) == 0
            logs.append(event_log(spark, f"round-{round_number}"))
            expected = reference(ROUNDS[: round_number + 1])
            assert read_joined(spark) == expected, f"after round {round_number}"
            assert read_gold(spark) == gold_reference(expected), f"after round {round_number}"
            assert_ctr(spark, ROUNDS[: round_number + 1], DIMENSIONS[: round_number + 1])
    return lake, logs


@pytest.fixture
def clicks_lake(three_rounds, monkeypatch):
    lake, logs = three_rounds
    monkeypatch.setenv("MILLPOND_LAKE", str(lake))
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    return lake, logs


def test_each_round_pairs_clicks_with_impressions_and_settles_unclicked_ones_once(spark, clicks_lake):
    """three_rounds compared silver and gold after every run; here: the final tables and the run records."""
    _, logs = clicks_lake
    assert read_joined(spark) == reference(ROUNDS)
    assert read_gold(spark) == gold_reference(reference(ROUNDS))
    assert_ctr(spark, ROUNDS, DIMENSIONS)
    for log in logs:
        assert {t: log[t].outcome for t in TABLES} == dict.fromkeys(TABLES, "succeeded")
        assert log[JOINED].rows_dropped_by_watermark == 0  # nothing landed late
        assert log[JOINED].state_rows > 0  # rows still waiting for a match (i8, unmatched clicks)
    assert [log[JOINED].rows_in for log in logs] == [len(r["impressions"]) + len(r["clicks"]) for r in ROUNDS]


def test_a_run_with_nothing_new_changes_nothing_even_after_a_dimension_change(spark, clicks_lake):
    """The dimension is not an input the way a stream is: changing it alone gives a lookup table nothing to do."""
    lake, _ = clicks_lake
    before = {t: latest_version(paths.table_path(t)) for t in TABLES}
    land_dimension(lake, {"ad_a": ("winter", "acme"), "ad_b": ("winter", "globex")})
    try:
        assert runner.main(["clicks", "--run-id", "idle"]) == 0
    finally:
        land_dimension(lake, DIMENSIONS[-1])
    assert {t: latest_version(paths.table_path(t)) for t in TABLES} == before
    assert read_joined(spark) == reference(ROUNDS)
    assert_ctr(spark, ROUNDS, DIMENSIONS)


def test_changing_the_join_on_a_checkpoint_is_refused_with_the_fix(clicks_lake):
    pipeline = load_pipeline("clicks")
    table = pipeline.tables[JOINED]
    wider = replace(table, join=replace(table.join, time_range=("0 seconds", "2 hours")))
    with pytest.raises(checkpoints.CheckpointProblem) as refused:
        checkpoints.verify(pipeline, wider)
    message = str(refused.value)
    assert "join: {" in message  # named field by field: the recorded join, then the spec's
    assert message.index('"time_range": ["0 seconds", "1 hour"]') < message.index(
        '"time_range": ["0 seconds", "2 hours"]'
    )
    assert f"millpond run clicks --full-refresh {JOINED}" in message


def test_a_lookup_change_is_not_a_checkpoint_shape_change(clicks_lake):
    """A stream-static join keeps no state: another dimension, key or lookup type runs on the same checkpoint."""
    pipeline = load_pipeline("clicks")
    table = pipeline.tables[CTR]
    checkpoints.verify(pipeline, replace(table, lookup=replace(table.lookup, type="inner")))


def test_a_delete_on_either_side_of_the_join_stops_neither_side_and_changes_no_joined_row(spark, clicks_lake):
    """A user's DELETE on a bronze table (an erasure request, say) commits removed files. The `from` side always
    skipped such a commit; the `with` side used to fail the next run ("Detected a data update"). Both now read alike:
    rows already joined stay, as docs/reprocess.md says of every append table downstream of a change."""
    deleted = {}
    for table_id in ("bronze.impressions", "bronze.clicks"):
        location = paths.table_path(table_id)
        first = spark.read.format("delta").load(str(location)).limit(1).collect()[0]
        key = "impression_id" if table_id == "bronze.impressions" else "click_id"
        spark.sql(f"DELETE FROM delta.`{location}` WHERE {key} = '{first[key]}'")
        deleted[table_id] = latest_version(location)
    joined_version = latest_version(paths.table_path(JOINED))
    assert runner.main(["clicks", "--run-id", "after-deletes"]) == 0
    # The deletes are new versions to both streams: a batch that reads nothing of them and writes no row.
    assert rows_added(paths.table_path(JOINED), joined_version, latest_version(paths.table_path(JOINED))) == 0
    assert read_joined(spark) == reference(ROUNDS)
    assert {t: latest_version(paths.table_path(t)) for t in deleted} == deleted


def test_a_missing_or_ambiguous_dimension_stops_the_lookup_table_with_the_fix(spark, lake, monkeypatch):
    """No campaigns file: the run fails at gold.campaign_ctr, naming the path, instead of writing nulls (left_outer)
    or nothing (inner); a key listed twice would double rows. Once fixed, the rerun writes what the reference says."""
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    land(lake, 0)
    folder = lake / "landing" / "campaigns"
    (folder / "campaigns.csv").unlink()
    assert runner.main(["clicks", "--run-id", "no-dimension"]) != 0
    failed = event_log(spark, "no-dimension")
    assert {t: failed[t].outcome for t in TABLES} == {**dict.fromkeys(TABLES, "succeeded"), CTR: "failed"}
    assert f"dimension landing.campaigns: no csv file at {folder}" in failed[CTR].error
    assert "Fix: put the dimension's csv data at" in failed[CTR].error
    assert latest_version(paths.table_path(CTR)) < 0
    land_dimension(lake, {"ad_a": ("spring", "acme"), "ad_b": ("spring", "globex")})
    (folder / "more.csv").write_text("ad_id,campaign,advertiser\nad_b,autumn,globex\n")
    assert runner.main(["clicks", "--run-id", "twice", "--tables", CTR]) != 0
    assert "holds a key more than once (ad_id='ad_b' (2 rows))" in event_log(spark, "twice")[CTR].error
    (folder / "more.csv").unlink()
    assert runner.main(["clicks", "--run-id", "fixed", "--tables", CTR]) == 0
    assert_ctr(spark, ROUNDS[:1], [{"ad_a": ("spring", "acme"), "ad_b": ("spring", "globex")}])


def test_a_delta_dimension_is_read_whole_by_each_run(spark, lake, tmp_path, monkeypatch):
    """The campaigns dimension as a Delta table instead of a CSV: each run reads its latest version, so a campaign
    renamed between runs applies to the rows of the next run only, as the reference says."""
    spec = yaml.safe_load((REPO / "pipelines" / "clicks.yaml").read_text())
    spec["sources"]["campaigns"] = {
        "static": True,
        "format": "delta",
        "path": "landing/campaigns_delta",
        "schema": "ad_id STRING, campaign STRING, advertiser STRING",
    }
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "clicks.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))  # measures keep order
    monkeypatch.setenv("MILLPOND_PIPELINES", str(tmp_path / "pipelines"))
    dimension, used = str(lake / "landing" / "campaigns_delta"), [DIMENSIONS[0], DIMENSIONS[2]]  # ad_a renamed
    for round_number, campaigns in enumerate(used):
        land(lake, round_number)  # (its CSV dimension is not read: the spec points at the Delta table)
        rows = [(ad, c, a) for ad, (c, a) in campaigns.items()]
        spark.createDataFrame(rows, "ad_id STRING, campaign STRING, advertiser STRING").write.format("delta").mode(
            "overwrite"
        ).save(dimension)
        assert runner.main(["clicks", "--run-id", f"delta-{round_number}"]) == 0
        assert_ctr(spark, ROUNDS[: round_number + 1], used[: round_number + 1])
    # Had the second run kept the first dimension, the table would differ:
    assert ctr_reference(ROUNDS[:2], used) != ctr_reference(ROUNDS[:2], [used[0], used[0]])


# ---------------------------------------------------------------------------------------------- crashes


def uncommitted_batches(table_id: str) -> int:
    checkpoint = paths.checkpoint_path("clicks", table_id)
    return len(list((checkpoint / "offsets").glob("[0-9]*"))) - len(list((checkpoint / "commits").glob("[0-9]*")))


def test_a_crash_after_the_join_write_replays_without_writing_twice(spark, lake, monkeypatch):
    """SIGKILL after the join table's Delta commit, before Spark's commit log: the rerun neither loses nor repeats."""
    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    land(lake, 0)
    assert runner.main(["clicks", "--run-id", "first"]) == 0
    land(lake, 1)
    env = {**os.environ, "MILLPOND_LAKE": str(lake), "MILLPOND_FAULT": f"{JOINED}:after_write"}
    proc = subprocess.run(
        [MILLPOND, "run", "clicks"], env=env, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-2000:] + proc.stderr[-2000:]
    written = latest_version(paths.table_path(JOINED))
    assert uncommitted_batches(JOINED) == 1  # in Delta, not yet in the checkpoint
    assert runner.main(["clicks", "--run-id", "rerun"]) == 0
    assert uncommitted_batches(JOINED) == 0
    assert latest_version(paths.table_path(JOINED)) >= written
    assert read_joined(spark) == reference(ROUNDS[:2])  # a Counter: a row written twice would count twice
    assert read_gold(spark) == gold_reference(reference(ROUNDS[:2]))
    assert_ctr(spark, ROUNDS[:2], DIMENSIONS[:2])


def test_generated_rounds_match_the_reference(spark, lake, monkeypatch):
    """`millpond generate clicks` rounds (millisecond times, random lags): two runs, each against the reference."""
    from millpond.dev.sample_data import CAMPAIGNS, campaigns_file, clicks_files

    monkeypatch.delenv("MILLPOND_PIPELINES", raising=False)
    impressions, clicks = lake / "landing" / "impressions", lake / "landing" / "clicks"
    campaigns_file(lake / "landing" / "campaigns")
    landed: list[dict] = []
    for run, files in enumerate((4, 2)):
        paths_landed = clicks_files(impressions, clicks, files=files, rows=40, seed=run)
        for path in paths_landed:
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if path.name.startswith("impressions"):
                landed.append(
                    {
                        "impressions": [
                            (r["impression_id"], r["ad_id"], minutes_of(r["impression_time"])) for r in records
                        ],
                        "clicks": [],
                    }
                )
            else:
                landed[-1]["clicks"] = [
                    (r["click_id"], r["impression_id"], minutes_of(r["click_time"])) for r in records
                ]
        assert runner.main(["clicks", "--run-id", f"generated-{run}"]) == 0
        expected = reference(landed)
        assert read_joined(spark) == expected, f"after run {run}"
        assert read_gold(spark) == gold_reference(expected)
        assert read_ctr_matches(spark, ctr_table([(expected, CAMPAIGNS)]))
    assert sum(row[3] is None for row in expected) > 0 and sum(row[3] is not None for row in expected) > 0
