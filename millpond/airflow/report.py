"""Print the latest run of a pipeline as `make run-dag`/`make demo` end: per-table table and where to look.

No Airflow or Spark import: reads the run summary JSON the Spark jobs wrote for the Airflow run id.
"""

from __future__ import annotations

import sys
from typing import Any

from millpond.lake import paths
from millpond.runs import reports, run_summary


def format_summary(tables: list[dict[str, Any]]) -> str:
    header = (
        f"{'table':<26} {'outcome':<11} {'in':>8} {'written':>8} {'quarant.':>8} {'late':>6} {'version':>9} {'sec':>7}"
    )
    lines = [header, "-" * len(header)]
    for t in tables:
        version = f"{t.get('version_before')}->{t.get('version_after')}"
        lines.append(
            f"{t['table']:<26} {t.get('outcome', ''):<11} {t.get('rows_in', 0):>8} {t.get('rows_written', 0):>8} "
            f"{t.get('rows_quarantined', 0):>8} {t.get('rows_dropped_by_watermark', 0):>6} {version:>9} "
            f"{t.get('seconds', 0):>7}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    pipeline, log = argv[0], (argv[1] if len(argv) > 1 else None)
    summary = run_summary.latest(pipeline)
    if summary is None:
        print(f"no run summary for {pipeline} under {paths.system_path('runs')}", file=sys.stderr)
        return 1
    print(f"\nAirflow run {summary['run_id']} of DAG {pipeline!r}:")
    print(format_summary(summary["tables"]))
    print("\nWhere to look:")
    print(f"  run summary   {run_summary.summary_path(pipeline, summary['run_id'])}")
    print(f"  tables        {paths.lake_root()}/<layer>/<table>   event log {paths.event_log_path()}")
    print(f"  quality gate  {reports.index_path()}")
    for table in summary["tables"]:
        if (table.get("gate") or {}).get("report_path"):
            print(f"    {table['table']:<24} {table['gate'].get('outcome', '')}: {table['gate']['report_path']}")
    if log:
        print(f"  Airflow log   {log}")
    print("  Airflow UI    `make up`, then the DAG's run -> run_summary task -> XCom (one entry per table)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
