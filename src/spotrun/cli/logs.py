"""`spotrun logs`: the attempts' logs as one stream, each attempt's start marked (see spotrun.server.logstream)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from spotrun.cli.backend import Backend


def print_logs(backend: Backend, job_id: int, out: TextIO, *, follow: bool) -> None:
    for text in backend.log_stream(job_id, follow=follow):
        out.write(text)
        out.flush()
