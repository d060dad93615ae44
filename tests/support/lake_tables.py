"""Read the activity tables back with Spark in the same shape as tests/support/reference.py."""

from __future__ import annotations

from pathlib import Path

from millpond.lake import paths

ISO = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def event_log(spark, run_id: str) -> dict:
    """One run's event-log rows by table id."""
    df = spark.read.format("delta").load(str(paths.event_log_path()))
    return {r.table: r for r in df.where(df.run_id == run_id).collect()}


def read(spark, table_id: str):
    return spark.read.format("delta").load(str(paths.table_path(table_id)))


def silver_keys(spark) -> list[tuple]:
    from pyspark.sql import functions as F

    rows = read(spark, "silver.activity").select("Device", "Index", F.date_format("Recorded_At", ISO).alias("t"))
    return sorted((r.Device, r.Index, r.t) for r in rows.collect())


def device_counts(spark) -> dict[str, int]:
    return {r.Device: r.total_recordings for r in read(spark, "gold.device_counts").collect()}


def hourly(spark) -> dict[tuple, dict]:
    from pyspark.sql import functions as F

    rows = (
        read(spark, "gold.activity_hourly")
        .select(F.date_format("hour", ISO).alias("hour"), "gt", "recordings", "avg_x", "avg_y", "avg_z")
        .collect()
    )
    return {(r.hour, r.gt): {k: r[k] for k in ("recordings", "avg_x", "avg_y", "avg_z")} for r in rows}


def assert_matches_reference(spark, reference) -> None:
    """Row counts AND keys AND every gold value: a distinct count alone would hide duplicates."""
    bronze = read(spark, "bronze.activity")
    assert bronze.count() == len(reference.bronze)
    quarantine_path = paths.quarantine_path("bronze.activity")
    quarantined = spark.read.format("delta").load(str(quarantine_path)).count() if Path(quarantine_path).exists() else 0
    assert quarantined == reference.quarantined
    assert bronze.count() + quarantined == reference.lines
    keys = silver_keys(spark)
    assert len(keys) == len(set(keys)), "duplicate keys in silver"
    assert keys == sorted(reference.silver)
    assert device_counts(spark) == reference.device_counts
    actual = hourly(spark)
    assert set(actual) == set(reference.hourly)
    for key, expected in reference.hourly.items():
        assert actual[key]["recordings"] == expected["recordings"], key
        for column in ("avg_x", "avg_y", "avg_z"):
            assert abs(actual[key][column] - expected[column]) < 1e-9, (key, column)


def data_commits_without_txn(lake: Path) -> list[str]:
    """Every commit file under the lake's tables (quarantines included) that adds or removes data without Delta's
    `txn` action: what would let a replayed batch be written twice. Maintenance commits (OPTIMIZE, properties)
    change no data and need none."""
    import json

    missing = []
    for log in sorted(Path(lake).glob("*/*/_delta_log")):
        if log.parts[-3] in ("_system", "landing"):
            continue
        for commit in sorted(log.glob("[0-9]" * 20 + ".json")):
            actions = [json.loads(line) for line in commit.read_text(encoding="utf-8").splitlines() if line.strip()]
            changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
            if any(change.get("dataChange", True) for change in changes) and not any("txn" in a for a in actions):
                missing.append(str(commit.relative_to(lake)))
    return missing


# ------------------------------------------------------------------------- without Spark: delta-rs, any lake


def read_rs(table_id: str):
    """A table as Arrow through delta-rs (a local or an s3a:// lake): for checks from a process with no JVM."""
    from deltalake import DeltaTable

    from millpond.lake.storage import delta_rs_location

    uri, options = delta_rs_location(paths.table_path(table_id))
    return DeltaTable(uri, storage_options=options).to_pyarrow_table()


def _iso(moment) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def snapshot_rs() -> dict:
    """The activity tables in the reference's shape, read by delta-rs."""
    silver = read_rs("silver.activity").select(["Device", "Index", "Recorded_At"]).to_pylist()
    hourly = read_rs("gold.activity_hourly").to_pylist()
    return {
        "silver": sorted((r["Device"], r["Index"], _iso(r["Recorded_At"])) for r in silver),
        "device_counts": {r["Device"]: r["total_recordings"] for r in read_rs("gold.device_counts").to_pylist()},
        "hourly": {
            (_iso(r["hour"]), r["gt"]): {k: r[k] for k in ("recordings", "avg_x", "avg_y", "avg_z")} for r in hourly
        },
    }


def assert_matches_reference_rs(reference) -> None:
    """assert_matches_reference, read by delta-rs: counts, every key, every gold value."""
    from millpond.lake.delta_log import latest_version

    bronze = read_rs("bronze.activity").num_rows
    assert bronze == len(reference.bronze)
    has_quarantine = latest_version(paths.quarantine_path("bronze.activity")) >= 0
    quarantined = read_rs("bronze.activity_quarantine").num_rows if has_quarantine else 0
    assert quarantined == reference.quarantined
    assert bronze + quarantined == reference.lines
    actual = snapshot_rs()
    assert len(actual["silver"]) == len(set(actual["silver"])), "duplicate keys in silver"
    assert actual["silver"] == sorted(reference.silver)
    assert actual["device_counts"] == reference.device_counts
    assert set(actual["hourly"]) == set(reference.hourly)
    for key, expected in reference.hourly.items():
        assert actual["hourly"][key]["recordings"] == expected["recordings"], key
        for column in ("avg_x", "avg_y", "avg_z"):
            assert abs(actual["hourly"][key][column] - expected[column]) < 1e-9, (key, column)
