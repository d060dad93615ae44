"""Reading a run's OpenLineage events back from the file transport, and the graph a spec says they must draw, built
from the spec's edges and the lake's paths, not by millpond.runs.lineage."""

from __future__ import annotations

import json
import os
from pathlib import Path

from deltalake import DeltaTable

from millpond.lake import paths
from millpond.lake.delta_log import table_state
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
