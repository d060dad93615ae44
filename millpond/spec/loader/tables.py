"""Tables: one `tables:` entry built from its parts, and all tables put in dependency order."""

from __future__ import annotations

from typing import Any

from millpond.spec.loader.joins import JoinLoader
from millpond.spec.loader.sinks import SinkLoader
from millpond.spec.loader.stateful import StatefulLoader
from millpond.spec.loader.streaming import StreamingLoader
from millpond.spec.model import LAYERS, OUTPUT_MODES, FileSource, Source, Table, normalize_table_id
from millpond.spec.suites import check_suite  # light: JSON only, no GX
from millpond.spec.syntax import TABLE_ID


class TableLoader(SinkLoader, StreamingLoader, JoinLoader, StatefulLoader):
    """A table from the parts each mixin reads, then the checks that need the whole table or all tables."""

    def table(self, table_id: str, raw: Any) -> Table | None:
        where = f"tables.{table_id}"
        spec = self.fields(
            where,
            raw,
            {
                "from": True,
                "description": False,
                "transform": False,
                "watermark": False,
                "dedup": False,
                "aggregate": False,
                "order_by": False,
                "output_mode": False,
                "trigger": False,
                "rate_limit": False,
                "keys": False,
                "expectations": False,
                "sink": False,
                "join": False,
                "stateful": False,
                "lookup": False,
            },
        )
        if not TABLE_ID.match(table_id):
            self.problem(
                where,
                f"{table_id!r} is not '<layer>.<name>'",
                f"name tables <layer>.<lower_snake_name> with layer in {', '.join(LAYERS)}",
            )
            return None
        if not spec:
            return None
        layer, name = table_id.split(".")
        mode = str(spec.get("output_mode", "append"))
        if mode not in OUTPUT_MODES:
            modes = ", ".join(OUTPUT_MODES)
            self.problem(f"{where}.output_mode", f"unknown output mode {mode!r}", f"use one of {modes}")
        table = Table(
            layer=layer,
            name=name,
            source=normalize_table_id(str(spec.get("from", ""))),
            description=str(spec.get("description", "")),
            transform=self.transform(f"{where}.transform", spec.get("transform")),
            watermark=self.watermark(f"{where}.watermark", spec.get("watermark")),
            dedup_keys=self.columns(
                f"{where}.dedup.keys",
                (self.fields(f"{where}.dedup", spec["dedup"], {"keys": True}).get("keys") if "dedup" in spec else None),
            ),
            aggregate=self.aggregate(f"{where}.aggregate", spec.get("aggregate")),
            order_by=self.columns(f"{where}.order_by", spec.get("order_by")),
            output_mode=mode,
            trigger=self.trigger(f"{where}.trigger", spec.get("trigger", "availableNow")),
            rate_limit=self.rate_limit(f"{where}.rate_limit", spec.get("rate_limit")),
            keys=self.columns(f"{where}.keys", spec.get("keys")),
            expectations=str(spec["expectations"]) if spec.get("expectations") else None,
            sink=self.sink(f"{where}.sink", spec.get("sink")),
            join=self.join(f"{where}.join", spec.get("join")),
            stateful=self.stateful(f"{where}.stateful", spec.get("stateful")),
            lookup=self.lookup(f"{where}.lookup", spec.get("lookup")),
        )
        self.streaming_rules(where, table)
        if table.lookup and table.reads_source:
            self.problem(
                f"{where}.lookup",
                "a table reading landing files or Kafka ingests them as they are (with quarantine)",
                f"look the dimension up in a table with 'from: {table.id}'",
            )
        if table.join:
            self.join_rules(where, table)
        if table.stateful:
            self.stateful_rules(where, table)
        if table.sink.is_file:
            self.file_sink_rules(where, table)
        if table.sink.is_kafka:
            self.kafka_sink_rules(where, table)
        if table.expectations:
            self.suite_rules(where, table)
        return table

    def suite_rules(self, where: str, table: Table) -> None:
        """The suite follows the naming scheme, gates a table that can hold rows back, and is well-formed."""
        expected = f"{self.path.stem}.{table.id}"
        if table.expectations != expected:
            self.problem(
                f"{where}.expectations",
                f"suite {table.expectations!r} breaks the naming scheme",
                f"name it {expected!r} (expectations/{expected}.json)",
            )
        if table.reads_source:
            self.problem(
                f"{where}.expectations",
                "a table reading landing files or Kafka cannot be gated",
                "put the suite on the table that reads it",
            )
        self.problems.extend(check_suite(str(table.expectations)))

    def dependency_order(self, sources: dict[str, Source], tables: dict[str, Table]) -> dict[str, Table]:
        for table in tables.values():
            self.join_upstream_rules(sources, tables, table)
            self.lookup_upstream_rules(sources, tables, table)
            source = sources.get(table.source)
            if isinstance(source, FileSource) and source.static:
                self.problem(
                    f"tables.{table.id}.from",
                    f"{table.source} is a static source (a dimension, read whole each run), not a stream",
                    f"read a streaming source, and look {table.source} up with "
                    f"'lookup: {{with: {table.source}, using: [...]}}'",
                )
            known = table.source in sources or table.source in tables
            if table.source and not known:
                names = ", ".join([*sources, *tables])
                self.problem(
                    f"tables.{table.id}.from", f"unknown source or table {table.source!r}", f"read one of: {names}"
                )
            if table.source == table.id:
                self.problem(f"tables.{table.id}.from", "a table cannot read itself", "read an upstream table")
            upstream = tables.get(table.source)
            if upstream is not None and not upstream.sink.is_delta and upstream is not table:
                what = (
                    f"sends its rows to Kafka topic {upstream.sink.topic}"
                    if upstream.sink.is_kafka
                    else f"writes {upstream.sink.format} files"
                )
                self.problem(
                    f"tables.{table.id}.from",
                    f"{table.source} {what}, and tables read their upstream as a Delta stream",
                    f"read {upstream.source} instead (the table {table.source} reads), or "
                    f"drop {table.source}'s 'sink:'",
                )
        ordered: dict[str, Table] = {}
        visiting: list[str] = []

        def visit(table_id: str) -> None:
            if table_id in ordered or table_id not in tables:
                return
            if table_id in visiting:
                cycle = " -> ".join([*visiting[visiting.index(table_id) :], table_id])
                self.problem(f"tables.{table_id}.from", f"tables form a cycle: {cycle}", "make one table read upstream")
                return
            visiting.append(table_id)
            for upstream in tables[table_id].upstreams:
                visit(upstream)
            visiting.pop()
            ordered[table_id] = tables[table_id]

        for table_id in tables:
            visit(table_id)
        return ordered
