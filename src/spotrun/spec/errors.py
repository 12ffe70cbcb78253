"""What is wrong with a job file: every problem, each with its field and line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    field: str  # dotted path like "spot.max_wait", list items as "spot.zones[1]"; "" for the file as a whole
    message: str
    line: int | None = None  # 1-based line in the job file, when known

    def format(self, source: str) -> str:
        where = source if self.line is None else f"{source}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


INVALID_JOB_FILE = "invalid job file"


class SpecError(Exception):
    """A job file that cannot be used; `problems` lists everything wrong with it, in file order. `heading` says what
    kind of refusal it is: the file's problems, or (a team server's) a valid file its settings do not allow."""

    def __init__(self, source: str, problems: Iterable[Problem], *, heading: str = INVALID_JOB_FILE) -> None:
        self.source = source
        self.problems = list(problems)
        self.heading = heading
        super().__init__(source, self.problems)

    def __str__(self) -> str:
        return "\n".join(problem.format(self.source) for problem in self.problems)
