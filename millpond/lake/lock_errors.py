"""Why a run could not take its pipeline's lock, the same on either lake: the `flock` (lock.py) and the object-store
lease (lease.py) both raise these, and the runner turns them into its exit codes."""

from __future__ import annotations


class PipelineBusy(RuntimeError):
    """Another run holds the pipeline's lock or lease; the message names the holder."""


class LakeNotWritable(RuntimeError):
    """The lock cannot even be created: a read-only, full or foreign-owned lake, caught before Spark starts."""
