"""What one validation of one batch found: the gate (millpond.driver.quality) builds it with Great Expectations, and
the run's record, the event log and the reports index read it. No pyspark or GX here, so readers stay light."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from millpond.runs import reports
from millpond.spec.suites import Rule


@dataclass
class RuleOutcome:
    rule: Rule
    success: bool
    unexpected_count: int
    element_count: int
    samples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "expectation": self.rule.name,
            "type": self.rule.type,
            "column": self.rule.column,
            "severity": self.rule.severity,
            "success": self.success,
            "unexpected_count": self.unexpected_count,
            "element_count": self.element_count,
            "samples": self.samples,
        }


BACKLOG_PARTS = ("files", "bytes", "rows", "batches")


@dataclass
class GateReport:
    """What one validation of one batch found, and where its report is."""

    pipeline: str
    table: str
    suite: str
    run_id: str
    batch_id: int
    mode: str  # run | reprocess | check
    element_count: int
    outcomes: list[RuleOutcome]
    report_path: str
    validated_at: datetime
    quarantine_failures: bool = False
    rows_dropped: int = 0
    seconds: float = 0.0  # wall time of the validation (GX + samples), for the cost figure
    backlog: tuple[int | None, ...] | None = None  # the table's backlog when its run started (RunContext.backlog)

    @property
    def failed(self) -> list[RuleOutcome]:
        """Failed `fail` expectations (the ones that block the batch unless their rows are quarantined)."""
        return [o for o in self.outcomes if o.rule.severity == "fail" and not o.success]

    @property
    def blocking(self) -> list[RuleOutcome]:
        if not self.quarantine_failures:
            return self.failed
        return [o for o in self.failed if not o.rule.row_level]  # a table-level rule has no rows to set aside

    @property
    def outcome(self) -> str:
        if self.blocking:
            return "failed"
        if self.failed:
            return "quarantined"
        return "warned" if any(not o.success for o in self.outcomes) else "passed"

    def entry(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "table": self.table,
            "suite": self.suite,
            "run_id": self.run_id,
            "batch_id": self.batch_id,
            "mode": self.mode,
            "outcome": self.outcome,
            "element_count": self.element_count,
            "rows_dropped": self.rows_dropped,
            "report_path": self.report_path,
            "validated_at": self.validated_at.isoformat(),
            "seconds": round(self.seconds, 3),
            "expectations": [o.as_dict() for o in self.outcomes],
            "backlog": dict(zip(BACKLOG_PARTS, self.backlog, strict=True)) if self.backlog else None,
        }

    def message(self) -> str:
        """Names the suite, each failed expectation with its unexpected count, the report and the way out."""
        failures = "; ".join(
            f"expectation {o.rule.name} failed: {o.unexpected_count} unexpected of {o.element_count} rows"
            for o in (self.blocking or self.failed)
        )
        pipeline = self.pipeline
        if self.mode == "check":
            return (
                f"data-quality check failed for {self.table} (suite {self.suite}): {failures}. Report: "
                f"{self.report_path} (all runs: {reports.index_path()}). A check writes no table; the next "
                f"`millpond run {pipeline}` would stop at this gate"
            )
        return (
            f"data-quality gate failed for {self.table} (suite {self.suite}, batch {self.batch_id}): {failures}. "
            f"Report: {self.report_path} (all runs: {reports.index_path()}). Nothing of this batch was written; "
            f"{self.table} and its downstream tables are unchanged and every run replays this batch until it passes. "
            f"Way out: fix the data or the rule in expectations/{self.suite}.json and rerun, or set the failing rows "
            f"aside: `millpond run {pipeline} --quarantine-failures {self.table}`"
        )
