"""File sinks (`sink: parquet|json|csv`, Spark's own file sink) with `MILLPOND_LAKE=s3a://...` against a real S3
server, through real `millpond run` processes: rounds landed in the bucket, a run SIGKILLed once a sink's batches
were committed but before millpond recorded them, a rerun, an idle run; each sink equals the plain-Python
reference, read back the way any reader of a file sink must: only the files its `_spark_metadata` log commits.

The runs are the only JVMs: the sinks' files are read with pyarrow and the csv/json modules from the bucket.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from millpond.lake import file_sink_log, paths
from millpond.lake.object_store import S3Path
from millpond.runs import run_summary
from tests.support.file_sink_pipeline import SINKS, SPEC, T0, land, reference
from tests.support.stress import MILLPOND

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_exports(s3_bucket, monkeypatch, tmp_path) -> tuple:
    """The exports pipeline on an s3a lake: its spec folder, and a local copy of what is landed (for the reference)."""
    monkeypatch.setenv("MILLPOND_LAKE", f"s3a://{s3_bucket.name}/lake")
    monkeypatch.setenv("MILLPOND_LEASE_SECONDS", "8")  # a killed run's lease lapses this soon
    monkeypatch.delenv("MILLPOND_FAULT", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    specs = tmp_path / "pipelines"
    specs.mkdir()
    (specs / "exports.yaml").write_text(yaml.safe_dump(SPEC))
    monkeypatch.setenv("MILLPOND_PIPELINES", str(specs))
    return s3_bucket, tmp_path / "local"


def land_in_bucket(bucket, local: Path, round_number: int) -> None:
    land(local, round_number)
    folder = local / "landing" / "events"
    bucket.put_files([folder / f"events-{round_number}.json"], "lake/landing/events")


def run(fault: str | None = None, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"MILLPOND_FAULT": fault} if fault else {})}
    return subprocess.run(
        [MILLPOND, "run", "exports", "--wait", "60", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,
    )


def minutes(stamp: str | datetime) -> int:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")) if isinstance(stamp, str) else stamp
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # parquet's timestamps are UTC instants
    return int((moment - T0).total_seconds()) // 60


def committed_rows(table_id: str) -> list[dict]:
    """The sink's rows from the files its log commits (file_sink_log.files), each file read from the bucket."""
    import pyarrow.parquet as pq

    path = paths.table_path(table_id)
    rows: list[dict] = []
    for name in sorted(file_sink_log.files(path, file_sink_log.latest_batch(path))):
        body = S3Path(name).read_bytes()
        if name.endswith(".parquet"):
            rows += pq.read_table(io.BytesIO(body)).to_pylist()
        elif ".json" in name:
            rows += [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        else:
            rows += list(csv.DictReader(io.StringIO(body.decode())))
    return rows


def read_sinks() -> dict[str, list[tuple]]:
    return {
        "gold.events_parquet": sorted(
            (minutes(r["ts"]), r["device"], r["value"]) for r in committed_rows("gold.events_parquet")
        ),
        "gold.big_json": sorted((r["device"], r["value"]) for r in committed_rows("gold.big_json")),
        "gold.counts_csv": sorted(
            (minutes(r["window_start"]), r["device"], int(r["readings"])) for r in committed_rows("gold.counts_csv")
        ),
    }


def test_file_sinks_on_s3a_match_the_reference_across_a_sigkill_and_an_idle_run(s3_exports):
    bucket, local = s3_exports
    land_in_bucket(bucket, local, 0)
    first = run(None, "--run-id", "r0")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert read_sinks() == reference(local)
    summary = {t["table"]: t for t in run_summary.load("exports", "r0")["tables"]}
    assert {t: summary[t]["rows_written"] for t in SINKS} == {t: len(rows) for t, rows in reference(local).items()}

    land_in_bucket(bucket, local, 1)
    killed = run("gold.big_json:after_query")  # its batches committed, millpond's records not yet
    assert killed.returncode == -signal.SIGKILL, (killed.stdout + killed.stderr)[-3000:]
    rerun = run(None, "--run-id", "rerun")
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-4000:]
    assert read_sinks() == reference(local)  # nothing of the killed run's batches twice

    listing = {t: sorted(bucket.keys(f"lake/gold/{t.split('.')[1]}/")) for t in SINKS}
    idle = run(None, "--run-id", "idle")
    assert idle.returncode == 0 and "no Spark application started" in idle.stdout, idle.stdout[-3000:]
    assert {t: sorted(bucket.keys(f"lake/gold/{t.split('.')[1]}/")) for t in SINKS} == listing

    status = subprocess.run([MILLPOND, "status", "exports", "--json"], capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    rows = {row["path"]: row for row in json.loads(status.stdout)}
    for table_id in SINKS:
        assert rows[str(paths.table_path(table_id))]["rows"] == len(reference(local)[table_id])
