"""The spec loader: YAML in, frozen `millpond.spec.model` objects out, every problem collected on the way.

One module of plain functions per part of a spec, each function taking the file's `fields.SpecCheck` (where the
file is, and every problem found so far) first and returning a checked value: `fields` (mappings and the small values
many parts share), `sources`, `kafka` (what sources and sinks share), `sinks`, `streaming` (transform, aggregate,
trigger), `stateful`, `joins` (join and lookup), `tables` (a table from those parts, and dependency order), and
`pipeline`, the whole file and the entry points. Imports run that way down, never back.
"""

from millpond.spec.loader.pipeline import all_spec_paths, load_pipeline, spec_path_for, validate_all

__all__ = ["all_spec_paths", "load_pipeline", "spec_path_for", "validate_all"]
