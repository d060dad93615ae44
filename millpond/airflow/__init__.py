"""Airflow for millpond: every pipeline spec becomes a DAG, arranged as the Airflow Spark provider arranges its code.

    factory.py     the DAG of each spec (and the stand-in DAG of a spec that does not load)
    operators.py   the tasks: operators store their arguments at parse time and do the work in execute()
    hooks.py       spark-submit as a task runs it; imported only inside execute() (the provider's imports are heavy)
    spark_app.py   the runner application: its file, Spark connection, environment, conf and exit codes
    py_files.py    the zip of our code the executors of a cluster import
    processes.py   a stopped task takes spark-submit's whole process tree with it
    assets.py      the Airflow Asset of each Delta table
    plugin.py      the data-quality report links and pages in the UI
    database.py    how long `make up`'s Airflow processes wait for SQLite's write lock
    report.py      the run summary `make run-dag` prints

The DAG processor imports factory.py and everything it imports every 30 s: those modules stay light.
"""
