"""The lake on disk, read and written without Spark: where everything lives and what the Delta logs say.

paths.py            the one naming scheme: table, quarantine, checkpoint, query, system-table and lock paths
delta_log.py        a Delta table's version, size and commits read from its log (status, summaries, skip checks)
system_tables.py    appends to millpond's own Delta tables by delta-rs (event log, validations, quarantines)
small_overwrite.py  a small complete-mode overwrite committed by delta-rs, with Delta's txn
lock.py             one writer per pipeline (an OS file lock)
object_store.py     s3a:// locations and the AWS_* access, boto3 / pyarrow / delta-rs clients for them
lease.py            one writer per pipeline across machines on object storage (a lease with conditional writes)
checkpoints.py      a table's checkpoint checked before Spark uses it: damage is an error, never a re-ingest
file_sink_log.py    a file-sink table's `_spark_metadata` log: its batches, files and rows
"""
