"""The spec loader: YAML in, frozen `millpond.spec.model` objects out, every problem collected on the way.

One mixin per part of a spec, each built on `fields.FieldLoader` (which holds the list of problems):
`sources`, `kafka` (what sources and sinks share), `sinks`, `streaming` (transform, aggregate, trigger), `stateful`,
`joins` (join and lookup), `tables` (a table from those parts, and dependency order), and `pipeline`, which combines
them into `PipelineLoader` and holds the entry points.
"""

from millpond.spec.loader.pipeline import all_spec_paths, load_pipeline, spec_path_for, validate_all

__all__ = ["all_spec_paths", "load_pipeline", "spec_path_for", "validate_all"]
