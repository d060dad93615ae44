"""What runs in the Spark driver: a pipeline's tables as streaming queries, in dependency order, in one application.

runner.py       the entry point (`main(argv)`; `millpond run`, spark-submit from Airflow)
session.py      the one SparkSession builder; spark_conf.py the settings every JVM starts with; jars.py the jars
s3a.py          an s3a:// lake's jars and settings, added only when the lake is on object storage
sources.py      streaming reads: landing folders (malformed lines kept), upstream Delta tables, Kafka
plan.py         a table's spec -> its streaming DataFrame (pure: no reads or writes)
streaming.py    the one streaming contract: query name, checkpoint, trigger, awaitTermination
sinks/          the foreachBatch write of each strategy (append, complete, merge, gated, landing, Kafka)
quality.py      the data-quality gate with Great Expectations (write-audit-publish per micro-batch)
progress.py     every micro-batch's progress, printed and recorded
preview.py      `millpond preview`: a table's micro-batches on the terminal, nothing written
faults.py       the fault points the kill tests stop a run at
driver_jit.py, speedups.py   the speed-ups and the settings that switch them off
connect_server.py   `millpond engine`: a Spark Connect server runs use through SPARK_REMOTE (code fingerprinted)
targets.py      where a run executes, chosen once: a JVM of its own (OwnJvm) or the engine (OnEngine)
connect_batch.py    what a run on the engine does in the server's batch worker (settings, reports)
run_guard.py    the check before every commit, and on the engine the guard that stops a gone run's batch
"""
