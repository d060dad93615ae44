"""The one exception a spec raises: it carries every problem, so a user fixes a spec in one pass."""

from __future__ import annotations


class SpecError(Exception):
    """Every problem found in one spec file, each naming the file, the field and the fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))
