"""Reading a run's OpenLineage events back from the file transport, and the graph a spec says they must draw, built
from the spec's edges and the lake's paths, not by millpond.runs.lineage."""

from __future__ import annotations

import json
import os
import threading
import types
import typing
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from deltalake import DeltaTable

from millpond.lake import paths
from millpond.lake.delta_log import table_state
from millpond.runs.run_summary import REPROCESS_DAG_SUFFIX
from millpond.spec import Pipeline


def file_transport(path: Path) -> dict[str, str]:
    """openlineage-python's own configuration by environment: every event appended to `path`."""
    return {
        "OPENLINEAGE__TRANSPORT__TYPE": "file",
        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(path),
        "OPENLINEAGE__TRANSPORT__APPEND": "true",
    }


def events_in(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def table_events(events: list[dict], pipeline: Pipeline, kind: str = "COMPLETE") -> dict[str, dict]:
    """The table jobs' events of one kind, by table id (the last one per table)."""
    prefix = f"{pipeline.name}."
    tables = {prefix + t: t for t in pipeline.tables}
    return {tables[e["job"]["name"]]: e for e in events if e["job"]["name"] in tables and e["eventType"] == kind}


def spec_graph(pipeline: Pipeline, lake: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Per table: its upstreams' paths (a landing folder for a source) and its own path, plus its quarantine's where
    the lake has one."""
    root = Path(os.path.abspath(lake))

    def location(upstream: str) -> str:
        kind, name = upstream.split(".", 1)
        if kind == "landing":
            return str(root / pipeline.sources[upstream].path)  # type: ignore[union-attr]
        return str(root / kind / name)

    graph = {}
    for table in pipeline.tables.values():
        outputs = [str(root / table.layer / table.name)]
        if (root / table.layer / f"{table.name}_quarantine" / "_delta_log").is_dir():
            outputs.append(str(root / table.layer / f"{table.name}_quarantine"))
        graph[table.id] = ([location(u) for u in table.upstreams], outputs)
    return graph


def drawn_graph(events: dict[str, dict]) -> dict[str, tuple[list[str], list[str]]]:
    return {t: ([i["name"] for i in e["inputs"]], [o["name"] for o in e["outputs"]]) for t, e in events.items()}


def assert_lineage_of_a_first_run(events: list[dict], pipeline: Pipeline, lake: Path) -> None:
    """What issue 51 asks of a run on a fresh lake: each table's COMPLETE event draws its spec edges with
    OpenLineage's names, counts the rows the table then holds, and a gold table's carries lineage for every column."""
    complete = table_events(events, pipeline)
    assert_parses([e for e in events if e["job"]["name"].removeprefix(f"{pipeline.name}.") in pipeline.tables])
    assert drawn_graph(complete) == spec_graph(pipeline, lake)
    for table_id, event in complete.items():
        out = event["outputs"][0]
        assert out["namespace"] == "file"
        assert out["facets"]["symlinks"]["identifiers"][0]["name"] == table_id
        state = table_state(paths.table_path(table_id))
        assert state is not None and out["outputFacets"]["outputStatistics"]["rowCount"] == state.rows, table_id
        columns = DeltaTable(str(paths.table_path(table_id))).schema().to_arrow().names
        assert [f["name"] for f in out["facets"]["schema"]["fields"]] == columns
        if pipeline.tables[table_id].expectations:  # the gate's verdict, one assertion per expectation
            assert out["facets"]["dataQualityAssertions"]["assertions"], table_id
        if table_id.startswith("gold."):
            fields = out["facets"]["columnLineage"]["fields"]
            assert set(fields) == set(columns) and all(f["inputFields"] for f in fields.values()), fields


def assert_children_of_airflow_tasks(events: list[dict], pipeline: Pipeline) -> None:
    """Every table event (each kind, each run) is a child of a run of the Airflow task that writes that table (the
    `gold` task for a gold table, `ingest` for the rest, of the pipeline's DAG or its reprocess DAG) and has a run of
    that DAG at its root: runs Airflow's OpenLineage provider sent events of its own for, so the two join in one
    graph."""
    tables = {f"{pipeline.name}.{t}": t for t in pipeline.tables}
    runs_of = defaultdict(set)
    dag_run_of: dict[str, str] = {}  # a task run's id: the DAG run the provider gave as its parent
    for event in events:
        runs_of[event["job"]["name"]].add(event["run"]["runId"])
        given = (event["run"].get("facets") or {}).get("parent")
        if given and event["job"]["name"] not in tables:
            dag_run_of[event["run"]["runId"]] = given["run"]["runId"]
    seen = 0
    for event in events:
        table_id = tables.get(event["job"]["name"])
        if table_id is None:
            continue
        seen += 1
        parent = event["run"]["facets"]["parent"]
        dag_id = parent["root"]["job"]["name"]
        assert dag_id in (pipeline.name, pipeline.name + REPROCESS_DAG_SUFFIX), (table_id, parent["root"])
        task = f"{dag_id}.{'gold' if table_id.startswith('gold.') else 'ingest'}"
        assert parent["job"]["name"] == task and parent["run"]["runId"] in runs_of[task], (table_id, parent)
        assert parent["root"]["run"]["runId"] in runs_of[dag_id], (table_id, parent["root"])
        # The root is the very DAG run this task run belongs to, not any run of that DAG.
        assert dag_run_of.get(parent["run"]["runId"]) == parent["root"]["run"]["runId"], (table_id, parent)
    assert seen, "no table events"


def _facet_classes() -> dict[tuple[str, str], type]:
    """The facets millpond's events carry (its own and the client's `tags`), by the kind of facet a dict holds and
    the key the OpenLineage spec gives each."""
    from openlineage.client.facet_v2 import (
        column_lineage_dataset,
        data_quality_assertions_dataset,
        error_message_run,
        job_type_job,
        output_statistics_output_dataset,
        parent_run,
        schema_dataset,
        symlinks_dataset,
        tags_job,
        tags_run,
    )

    return {
        ("DatasetFacet", "schema"): schema_dataset.SchemaDatasetFacet,
        ("DatasetFacet", "symlinks"): symlinks_dataset.SymlinksDatasetFacet,
        ("DatasetFacet", "columnLineage"): column_lineage_dataset.ColumnLineageDatasetFacet,
        ("DatasetFacet", "dataQualityAssertions"): data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet,
        ("OutputDatasetFacet", "outputStatistics"): output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet,
        ("RunFacet", "parent"): parent_run.ParentRunFacet,
        ("RunFacet", "errorMessage"): error_message_run.ErrorMessageRunFacet,
        ("RunFacet", "tags"): tags_run.TagsRunFacet,
        ("JobFacet", "jobType"): job_type_job.JobTypeJobFacet,
        ("JobFacet", "tags"): tags_job.TagsJobFacet,
    }


PLAIN: dict[object, type | tuple[type, ...]] = {str: str, int: int, float: (int, float), bool: bool}


def parse_event(event: dict):
    """`event` read into openlineage-python's own classes (`event_v2.RunEvent`, each facet the class its key names),
    every field through the class's constructor and validators. A field the class does not have fails."""
    import attr
    from openlineage.client.event_v2 import RunEvent
    from openlineage.client.generated.base import BaseFacet

    facets = _facet_classes()

    def build(kind, value):
        if value is None:
            return None
        origin = typing.get_origin(kind)
        if origin in (typing.Union, types.UnionType):
            return build(next(a for a in typing.get_args(kind) if a is not type(None)), value)
        if origin is list:
            return [build(typing.get_args(kind)[0], v) for v in value]
        if origin is dict:
            item = typing.get_args(kind)[1]
            is_facet = isinstance(item, type) and issubclass(item, BaseFacet)
            return {k: build(facets[item.__name__, k] if is_facet else item, v) for k, v in value.items()}
        if isinstance(kind, type) and issubclass(kind, Enum):
            return kind(value)
        if isinstance(kind, type) and attr.has(kind):
            attr.resolve_types(kind)
            fields = {f.name: f for f in attr.fields(kind)}
            unknown = set(value) - set(fields)
            assert not unknown, f"{kind.__name__} has no field {sorted(unknown)}: {value}"
            return kind(**{f.alias: build(f.type, value[n]) for n, f in fields.items() if f.init and n in value})
        if kind in PLAIN:  # attrs checks no plain type: JSON's own, as the spec's schema types them
            assert isinstance(value, PLAIN[kind]) and not (kind is not bool and isinstance(value, bool)), (kind, value)
        return value

    return build(RunEvent, event)


def assert_parses(events: list[dict]) -> None:
    """Each event reads into openlineage-python's classes, and they write it back unchanged."""
    from openlineage.client.serde import Serde

    for event in events:
        assert Serde.to_dict(parse_event(event)) == event, event["job"]["name"]


@contextmanager
def http_receiver() -> Iterator[tuple[str, list[dict]]]:
    """A loopback OpenLineage receiver: the URL for `OPENLINEAGE_URL`, and every event POSTed to its lineage endpoint
    (`/api/v1/lineage`, what openlineage-python's HTTP transport and Marquez use), in arrival order."""
    received: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path.rstrip("/") != "/api/v1/lineage":
                self.send_response(404)
            else:
                received.append(json.loads(body))
                self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
