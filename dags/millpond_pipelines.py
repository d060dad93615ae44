"""
## millpond pipelines

Every spec in `pipelines/*.yaml` becomes one DAG (dag id = pipeline name), built by `millpond.airflow.factory`:

`ingest` (bronze + silver, one Spark application) → `quality_gate` → `gold` (one Spark application) → `run_summary`

- **Spark**: connection `spark_millpond` (`AIRFLOW_CONN_SPARK_MILLPOND`); the Makefile default is `local[2]`.
- **One writer**: the Spark job takes the pipeline lock `$MILLPOND_LAKE/_system/locks/<pipeline>.lock`.
- **Per-table results**: `run_summary` XComs (key = table id) and
  `$MILLPOND_LAKE/_system/runs/<pipeline>/<run id>.json`.
- **Trigger params**: `full_refresh` = tables to rebuild from their source (downstream tables are rebuilt too).
- **A spec that does not load** becomes a paused DAG of its own listing its problems; the others still load.
- **Freshness**: `millpond_freshness` checks every table with a `freshness:` goal every 5 minutes and notifies when
  one goes stale and when it recovers; a pipeline with goals has a deadline alert (docs/freshness.md).
"""

from pathlib import Path

from millpond.airflow.factory import build_all

globals().update(build_all(__doc__ or "", project=Path(__file__).resolve().parents[1]))
