"""OpenLineage events for every table of every run, built from the spec (the lineage graph millpond already has) and
the run's results, sent through openlineage-python and kept in `_system/lineage`.

Why from millpond and not Spark's OpenLineage listener: the listener splits a `foreachBatch` write into two events
that name nothing in common, cannot tell which Airflow task a query on a long-lived engine belongs to, and is tested
upstream on Spark 4.0 only. The spec names every edge; the runner's Python process, the same on both backends, knows
what each table committed.

Per table per run: a job `<pipeline>.<layer>.<table>`, a START at the table's start and a COMPLETE (or FAIL) at its
end, both sent when the run records itself. Inputs and outputs are named by OpenLineage's dataset naming (a folder
lake: namespace `file` and the absolute path; an `s3a://` lake: namespace `s3://<bucket>` and the key), each table
with a `symlinks` facet holding its name (`gold.device_counts`); the output carries `schema`, `outputStatistics`
(the rows this run committed) and `columnLineage` derived from the spec (columns.py); a quarantine is an output of
its own. The parent is the run's Airflow task when the task passes OpenLineage's standard `OPENLINEAGE_PARENT_ID`
(`namespace/job/runId`, with `OPENLINEAGE_ROOT_PARENT_ID` for the root), else the millpond run, a job named after
the pipeline whose own START and COMPLETE are sent too.

Where events go: the transport openlineage-python configures itself from (`openlineage.yml`, `OPENLINEAGE_CONFIG`,
`OPENLINEAGE__TRANSPORT__*`, `OPENLINEAGE_URL`; `OPENLINEAGE_DISABLED=true` sends nothing), and always the Delta
table `_system/lineage` (one row per event, the event as JSON), so a lake with nothing configured still has its
lineage to query. Sending runs on a thread the run waits for at most `MILLPOND_LINEAGE_TIMEOUT_SECONDS`: a dead or
slow receiver is logged once, never fails or stalls the run.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from millpond import settings
from millpond.lake import delta_log, paths, storage, system_tables
from millpond.runs.lineage_columns import Column, column_lineage, kafka_dataset
from millpond.runs.run_record import RunContext, TableResult
from millpond.spec import DeltaSource, FileSource, KafkaSource, Pipeline, Table, resolve_setting
from millpond.spec.suites import load_suite

if TYPE_CHECKING:  # annotations only: openlineage loads when a run records itself
    from openlineage.client.event_v2 import InputDataset, OutputDataset, RunEvent

# Imported inside functions: openlineage-python (a quarter second, requests and attrs) only when a run records
# itself: the DAG processor imports this module with the operators.

PRODUCER = "https://github.com/millpond/millpond"
NAMESPACE = "OPENLINEAGE_NAMESPACE"  # OpenLineage's own variable for the job namespace
PARENT = "OPENLINEAGE_PARENT_ID"  # namespace/job/runId, as the Airflow provider's `lineage_parent_id` renders it
ROOT_PARENT = "OPENLINEAGE_ROOT_PARENT_ID"
DEFAULT_NAMESPACE = "millpond"
COLUMNS = (
    ("event_time", "timestamp"),
    ("event_type", "string"),
    ("job_namespace", "string"),
    ("job_name", "string"),
    ("run_uuid", "string"),
    ("parent_run_uuid", "string"),
    ("pipeline", "string"),
    ("table", "string"),
    ("run_id", "string"),  # millpond's run id, as in the event log
    ("event", "string"),  # the whole event, as OpenLineage's JSON
)


def job_namespace() -> str:
    """OPENLINEAGE_NAMESPACE, else the parent's (an Airflow task's: one namespace for the whole graph), else
    `millpond`."""
    given = os.environ.get(PARENT, "").strip()
    parent = _split_parent(given)[0] if given and _parent_well_formed(given) else DEFAULT_NAMESPACE
    return os.environ.get(NAMESPACE, "").strip() or parent


def job_name(pipeline: str, table_id: str) -> str:
    return f"{pipeline}.{table_id}"


def record(pipeline: Pipeline, run: RunContext, results: list[TableResult]) -> None:
    """Build, keep and send the run's events. Never raises: the tables and the event log are committed, so a part
    that fails (a table's events, the `_system/lineage` commit, the sending) is said and the rest goes on."""
    try:
        timeout = settings.LINEAGE_TIMEOUT_SECONDS.seconds()
        events = run_events(pipeline, run, results)
    except Exception as exc:
        _said(run, "not built", exc)
        return
    try:
        keep(pipeline, run, events)
    except Exception as exc:
        _said(run, f"not kept in {paths.system_path('lineage')}", exc)
    send(events, timeout)


def _said(run: RunContext, what: str, exc: Exception) -> None:
    print(f"millpond: lineage of run {run.run_id} {what} ({type(exc).__name__}: {exc})", file=sys.stderr)


def run_events(pipeline: Pipeline, run: RunContext, results: list[TableResult]) -> list[RunEvent]:
    """START and COMPLETE/FAIL for each table result, under the parent the run has (or a millpond run job of its
    own, whose events come first and last)."""
    from openlineage.client.event_v2 import RunState

    namespace = job_namespace()
    parent, own_parent = parent_facet(pipeline.name, run, results)
    events: list[RunEvent] = []
    if own_parent is not None:
        events.append(own_parent(RunState.START, min((r.started_at for r in results), default=_now())))
    for result in results:
        try:
            events += table_events(pipeline, result, namespace, parent)
        except Exception as exc:  # this table's events only: the others still tell their part
            _said(run, f"for {result.table} not built", exc)
    if own_parent is not None:
        failed = any(r.outcome in ("failed", "gate_failed") for r in results)
        ended = max((r.ended_at or _now() for r in results), default=_now())
        events.append(own_parent(RunState.FAIL if failed else RunState.COMPLETE, ended))
    return events


def table_events(pipeline: Pipeline, result: TableResult, namespace: str, parent: Any) -> list[RunEvent]:
    """One table's START and its ending."""
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import job_type_job
    from openlineage.client.uuid import generate_new_uuid

    events: list[RunEvent] = []
    table = pipeline.tables[result.table]
    run_uuid = str(generate_new_uuid(result.started_at))
    facets: dict[str, Any] = {"parent": parent} if parent else {}
    job = Job(
        namespace=namespace,
        name=job_name(pipeline.name, table.id),
        facets={"jobType": job_type_job.JobTypeJobFacet(processingType="STREAMING", integration="MILLPOND")},
    )
    inputs = input_datasets(pipeline, table)
    events.append(
        RunEvent(
            eventType=RunState.START,
            eventTime=result.started_at.isoformat(),
            run=Run(runId=run_uuid, facets=facets),
            job=job,
            inputs=inputs,
            outputs=[_target(table)],
            producer=PRODUCER,
        )
    )
    state, end_facets = _ending(result)
    events.append(
        RunEvent(
            eventType=state,
            eventTime=(result.ended_at or _now()).isoformat(),
            run=Run(runId=run_uuid, facets={**facets, **end_facets}),
            job=job,
            inputs=inputs,
            outputs=output_datasets(pipeline, table, result),
            producer=PRODUCER,
        )
    )
    return events


def parent_facet(pipeline: str, run: RunContext, results: list[TableResult]) -> tuple[Any, Any]:
    """(the parent facet, a maker of the millpond run's own events or None): the Airflow task's run when
    OPENLINEAGE_PARENT_ID is set, else the millpond run (job `<pipeline>`, a UUIDv7 derived from millpond's run id)."""
    from openlineage.client.event_v2 import Job, Run, RunEvent
    from openlineage.client.facet_v2 import parent_run

    given = os.environ.get(PARENT, "").strip()
    if given and not _parent_well_formed(given):
        print(f"millpond: {PARENT}={given!r} is not namespace/job/runId: the run is its own parent", file=sys.stderr)
        given = ""
    if given:
        namespace, name, run_uuid = _split_parent(given)
        root_given = os.environ.get(ROOT_PARENT, "").strip()
        root_ns, root_name, root_uuid = _split_parent(root_given) if root_given else (namespace, name, run_uuid)
        root = parent_run.Root(run=parent_run.RootRun(runId=root_uuid), job=parent_run.RootJob(root_ns, root_name))
        facet = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=run_uuid), job=parent_run.Job(namespace=namespace, name=name), root=root
        )
        return facet, None
    namespace = job_namespace()
    from openlineage.client.uuid import generate_static_uuid

    started = min((r.started_at for r in results), default=_now())
    run_uuid = str(generate_static_uuid(started, f"millpond:{pipeline}:{run.run_id}".encode()))
    root = parent_run.Root(run=parent_run.RootRun(runId=run_uuid), job=parent_run.RootJob(namespace, pipeline))
    facet = parent_run.ParentRunFacet(
        run=parent_run.Run(runId=run_uuid), job=parent_run.Job(namespace=namespace, name=pipeline), root=root
    )

    def own(state: Any, at: datetime) -> RunEvent:
        return RunEvent(
            eventType=state,
            eventTime=at.isoformat(),
            run=Run(runId=run_uuid),
            job=Job(namespace=namespace, name=pipeline),
            producer=PRODUCER,
        )

    return facet, own


def _parent_well_formed(text: str) -> bool:
    try:
        _split_parent(text)
    except ValueError:
        return False
    return True


def _split_parent(text: str) -> tuple[str, str, str]:
    """`namespace/job/runId`: a namespace may hold `/` (`airflow://prod`), a job name and a run id do not."""
    namespace, name, run_uuid = text.rsplit("/", 2)
    uuid.UUID(run_uuid)
    return namespace, name, run_uuid


def input_datasets(pipeline: Pipeline, table: Table) -> list[InputDataset]:
    """Each upstream (a landing folder, a Kafka topic, a table) and a lookup's dimension."""
    found: list[InputDataset] = []
    for upstream in (*table.upstreams, *((table.lookup.dimension,) if table.lookup else ())):
        source = pipeline.sources.get(upstream)
        if isinstance(source, KafkaSource):
            found += [_kafka_dataset(*kafka_dataset(source, topic)) for topic in source.topics]
        elif isinstance(source, FileSource | DeltaSource):  # a landing folder, another job's Delta table
            found.append(_dataset(paths.landing_path(source.path), None, output=False))
        else:
            found.append(_dataset(paths.table_path(upstream), upstream, output=False))
    return found


def output_datasets(pipeline: Pipeline, table: Table, result: TableResult) -> list[OutputDataset]:
    """The table (schema, rows committed, column lineage) and, when it has one, its quarantine; a Kafka sink's
    topic (messages are not counted: at least once, a replayed batch sends again)."""
    from openlineage.client.facet_v2 import column_lineage_dataset, output_statistics_output_dataset

    if table.sink.is_kafka:
        return [_target(table)]

    location = paths.table_path(table.id)
    columns = delta_columns(location) if table.sink.is_delta else []
    committed = result.rows_written  # what the driver counted from the sink's log (the newest overwrite if complete)
    lineage = column_lineage(pipeline, table, [c.name for c in columns], delta_columns)
    fields = {
        name: column_lineage_dataset.Fields(
            inputFields=[
                column_lineage_dataset.InputField(
                    namespace=ns,
                    name=dataset,
                    field=column,
                    transformations=[column_lineage_dataset.Transformation(type=kind, subtype=subtype)],
                )
                for (ns, dataset), column, kind, subtype in sources
            ]
        )
        for name, sources in lineage.items()
    }
    out = _dataset(location, table.id, output=True, columns=columns)
    out.facets["columnLineage"] = column_lineage_dataset.ColumnLineageDatasetFacet(fields=fields)
    out.outputFacets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=committed
    )
    if result.gate and table.expectations:
        out.facets["dataQualityAssertions"] = gate_assertions(table.expectations, result.gate)
    outputs = [out]
    quarantine = paths.quarantine_path(table.id)
    if (quarantine / "_delta_log").is_dir():
        kept = _dataset(quarantine, f"{table.id}_quarantine", output=True, columns=delta_columns(quarantine))
        kept.outputFacets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=result.rows_quarantined
        )
        outputs.append(kept)
    return outputs


def gate_assertions(suite_name: str, gate: dict[str, Any]) -> Any:
    """The gate's verdict on this run's batches, one assertion per expectation of the table's suite: failed when
    some batch failed it (whatever its severity: a `warn` rule fails without blocking, as OpenLineage's facet says)."""
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq

    failed = {item["expectation"] for item in [*gate.get("failed_expectations", []), *gate.get("warnings", [])]}
    return dq.DataQualityAssertionsDatasetFacet(
        assertions=[
            dq.Assertion(
                assertion=rule.type,
                success=rule.name not in failed,
                column=rule.column or None,
                severity=rule.severity,
                name=rule.name,
            )
            for rule in load_suite(suite_name).rules
        ]
    )


def _target(table: Table) -> Any:
    """What the table writes, as an output dataset without facets: its Delta or file folder, or a Kafka topic."""
    from openlineage.client.event_v2 import OutputDataset

    if table.sink.is_kafka:
        assert table.sink.topic is not None and table.sink.bootstrap_servers is not None
        server = resolve_setting(table.sink.bootstrap_servers).split(",")[0].strip()
        return OutputDataset(namespace=f"kafka://{server}", name=table.sink.topic, facets={}, outputFacets={})
    return _dataset(paths.table_path(table.id), table.id, output=True)


def delta_columns(location: paths.LakePath | str) -> list[Column]:
    """The table's columns, their types and comments from its Delta schema (empty when there is no table yet): the
    log's newest metadata, read without opening the table; delta-rs where that reader cannot find it."""
    metadata = delta_log.newest_metadata(location)
    if metadata == {}:
        return []
    if metadata is not None:
        fields = json.loads(metadata["schemaString"])["fields"]
    elif (table := system_tables.open_table(location)) is not None:
        fields = json.loads(table.schema().to_json())["fields"]
    else:
        return []
    return [
        Column(
            f["name"],
            f["type"] if isinstance(f["type"], str) else f["type"]["type"],
            (f.get("metadata") or {}).get("comment"),
        )
        for f in fields
    ]


def _dataset(location: paths.LakePath, table_id: str | None, output: bool, columns: list[Column] | None = None) -> Any:
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import schema_dataset, symlinks_dataset

    namespace, name = storage.lineage_name(location)
    facets: dict[str, Any] = {}
    if table_id is not None:  # the name within its lake: two lakes' `gold.device_counts` are two tables
        lake = storage.lineage_uri(paths.lake_root())
        identifier = symlinks_dataset.Identifier(namespace=lake, name=table_id, type="TABLE")
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(identifiers=[identifier])
    if columns:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[
                schema_dataset.SchemaDatasetFacetFields(name=c.name, type=c.type, description=c.description)
                for c in columns
            ]
        )
    if output:
        return OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets={})
    return InputDataset(namespace=namespace, name=name, facets=facets)


def _kafka_dataset(namespace: str, topic: str) -> Any:
    from openlineage.client.event_v2 import InputDataset

    return InputDataset(namespace=namespace, name=topic)


def _ending(result: TableResult) -> tuple[Any, dict[str, Any]]:
    from openlineage.client.event_v2 import RunState
    from openlineage.client.facet_v2 import error_message_run

    if result.outcome == "skipped":  # not run: an upstream failed
        return RunState.ABORT, {}
    if result.outcome in ("failed", "gate_failed"):
        message = result.error or f"{result.table} {result.outcome}"
        facet = error_message_run.ErrorMessageRunFacet(message=message, programmingLanguage="python")
        return RunState.FAIL, {"errorMessage": facet}
    return RunState.COMPLETE, {}


def keep(pipeline: Pipeline, run: RunContext, events: list[RunEvent]) -> None:
    """One commit of the run's events to `_system/lineage` (delta-rs, no JVM)."""
    from openlineage.client.serde import Serde

    rows = []
    for event in events:
        parent = (event.run.facets or {}).get("parent")
        table = event.job.name.removeprefix(f"{pipeline.name}.") if event.job.name != pipeline.name else None
        rows.append(
            {
                "event_time": datetime.fromisoformat(event.eventTime),
                "event_type": event.eventType.value if event.eventType else None,
                "job_namespace": event.job.namespace,
                "job_name": event.job.name,
                "run_uuid": event.run.runId,
                "parent_run_uuid": getattr(getattr(parent, "run", None), "runId", None),
                "pipeline": pipeline.name,
                "table": table,
                "run_id": run.run_id,
                "event": Serde.to_json(event),
            }
        )
    if rows:
        system_tables.append(paths.system_path("lineage"), COLUMNS, rows)


def send(events: list[RunEvent], timeout: float) -> None:
    """Through the transport openlineage-python configures, on a thread waited for at most `timeout` seconds."""
    if not configured():
        return
    failure: list[str] = []

    def emit() -> None:
        from openlineage.client import OpenLineageClient

        try:
            client = OpenLineageClient()
            for event in events:
                client.emit(event)
            client.close(timeout)
        except Exception as exc:
            failure.append(f"{type(exc).__name__}: {exc}")

    sender = threading.Thread(target=emit, name="millpond-lineage", daemon=True)
    sender.start()
    sender.join(timeout)
    if sender.is_alive():
        print(f"millpond: lineage events not sent within {timeout:g} s; the run goes on", file=sys.stderr)
    elif failure:
        print(f"millpond: lineage events not sent ({failure[0]}); the run goes on", file=sys.stderr)


def configured() -> bool:
    """Whether openlineage-python has a transport to send to (else events are only kept in `_system/lineage`, not
    printed to the console, which is the client's own fallback)."""
    if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if any(k.startswith("OPENLINEAGE__TRANSPORT") for k in os.environ) or os.environ.get("OPENLINEAGE_URL"):
        return True
    home = os.path.expanduser("~/.openlineage/openlineage.yml")
    candidates = [os.environ.get("OPENLINEAGE_CONFIG"), "openlineage.yml", home]
    return any(c and os.path.isfile(c) for c in candidates)


def _now() -> datetime:
    return datetime.now(UTC)
