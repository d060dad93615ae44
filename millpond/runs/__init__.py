"""What each run did, kept where users look: the per-table records, the run summary, the event log, the reports.

run_record.py   one table's result in one run (light: built without a JVM when nothing is new)
run_summary.py  the JSON summary per orchestrator run id under `_system/runs/<pipeline>/`
event_log.py    one Delta row per table per run under `_system/event_log`
reports.py      gate reports under `_reports/`: GX Data Docs per validation and one index over time
"""
