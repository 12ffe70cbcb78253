"""Which jobs `spotrun status` lists: every job that has not ended and the newest ended ones (`--all`: every job).
A store keeps every job it ran, and a list of thousands of ended jobs hides the few that matter now."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotrun.control.states import is_terminal

if TYPE_CHECKING:
    from spotrun.api_models import JobRow
    from spotrun.cli.backend import Backend

RECENT_ENDED = 20


@dataclass(frozen=True)
class JobList:
    rows: list[JobRow]  # oldest first
    older_ended_left_out: bool


def listed_jobs(backend: Backend, every: bool = False, recent_ended: int = RECENT_ENDED) -> JobList:
    if every:
        return JobList(backend.rows(), older_ended_left_out=False)
    unended = backend.rows(ended=False)
    if any(is_terminal(row.state) for row in unended):  # a server older than the selection sent every job
        return JobList(unended, older_ended_left_out=False)
    # read after the others: a job that ends in between is in both lists and kept as the newer read says
    ended = backend.rows(ended=True, limit=recent_ended + 1)  # one more tells whether older ones are left out
    shown = ended[-recent_ended:] if recent_ended else []
    rows = {row.id: row for row in [*unended, *shown]}
    return JobList(sorted(rows.values(), key=lambda row: row.id), older_ended_left_out=len(ended) > len(shown))
