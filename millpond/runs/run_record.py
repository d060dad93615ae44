"""What one run did, table by table: the records the runner prints, the event log stores and Airflow shows.

Light on purpose (no pyspark): a run that finds nothing new builds these without starting a JVM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from millpond.runs import reports
from millpond.runs.gate_report import GateReport


@dataclass
class RunContext:
    """Who asked for this run and for which data interval: ties every event-log row to its Airflow run."""

    run_id: str
    trigger: str = "manual"
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None
    quarantine_failures: tuple[str, ...] = ()  # gated tables whose `fail` rows are quarantined in this run only
    # What was waiting per table when the run started (millpond.lake.backlog, before any Spark): files, bytes, rows,
    # batches, each None where not measured. The gate's history carries its table's, for the report index.
    backlog: dict[str, tuple[int | None, ...]] = field(default_factory=dict)


@dataclass
class TableResult:
    table: str
    layer: str
    started_at: datetime
    ended_at: datetime | None = None
    micro_batches: int = 0
    rows_in: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    rows_dropped_by_watermark: int = 0
    state_rows: int = 0
    version_before: int = -1
    version_after: int = -1
    outcome: str = "running"
    error: str | None = None
    full_refresh: bool = False
    gate: dict | None = None  # data-quality gate summary (gated tables only): suite, outcome, failures, report
    # Spark's per-phase milliseconds summed over the run's micro-batches (latestOffset = listing or Delta log
    # reads, addBatch = the write, walCommit/commitOffsets = checkpoint commits): where a slow run's time went.
    durations_ms: dict[str, int] = field(default_factory=dict)
    input_unchanged: bool = False  # source as it was when the last finished run started: no query was started
    # Why there was nothing to read yet, e.g. "nothing has landed in landing/impressions yet": no query was started.
    nothing_yet: str | None = None
    watermark: datetime | None = None  # event-time watermark after the run's last batch (tables with a watermark)
    processed_rows_per_second: float | None = None  # input rows over the batches' summed durations
    # A reprocess (`millpond run --reprocess`): the event-time interval rebuilt and the rows its slice held before
    # (rows_written: after); a complete-mode table rebuilt whole names the interval that caused it.
    reprocess_start: datetime | None = None
    reprocess_end: datetime | None = None
    rows_replaced: int | None = None
    # What was waiting when the run started, before any Spark (millpond.lake.backlog; a join's two sources together):
    # files, bytes (file and Delta sources), rows (Delta, Kafka), batches; None where not measured.
    backlog_files: int | None = None
    backlog_bytes: int | None = None
    backlog_rows: int | None = None
    backlog_batches: int | None = None

    def record_gate(self, report: GateReport) -> None:
        """Fold one validated batch into the table's gate summary (the run summary and the Airflow gate read it)."""
        gate = self.gate or {
            "suite": report.suite,
            "outcome": "passed",
            "batches": 0,
            "rows_validated": 0,
            "rows_set_aside": 0,
            "failed_expectations": [],
            "warnings": [],
            "report_path": None,
        }
        gate["batches"] += 1
        gate["rows_validated"] += report.element_count
        gate["rows_set_aside"] += report.rows_dropped
        gate["report_path"] = report.report_path
        gate["index_path"] = str(reports.index_path())
        order = ("passed", "warned", "quarantined", "failed")
        gate["outcome"] = max(gate["outcome"], report.outcome, key=order.index)
        for o in report.outcomes:
            if o.success:
                continue
            item = {
                "expectation": o.rule.name,
                "column": o.rule.column,
                "severity": o.rule.severity,
                "unexpected_count": o.unexpected_count,
                "batch_id": report.batch_id,
            }
            blocking = o in report.blocking
            gate["failed_expectations" if blocking else "warnings"].append(item)
        self.gate = gate

    @property
    def seconds(self) -> float:
        return ((self.ended_at or datetime.now(UTC)) - self.started_at).total_seconds()
