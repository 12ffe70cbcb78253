"""What the CLI's commands need from spotrun, behind one interface with two implementations: embedded (the store
on this machine, a controller started on demand) and remote (a team server over HTTP, when SPOTRUN_SERVER is set).

Both answer with the same read models (`spotrun.api_models`) and raise the same errors:
`JobNotFound`, `LookupError` (nothing to preempt), `SpecError` (invalid job file), `BackendError` (anything else
the user must fix, e.g. an unreachable server).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from spotrun.api_models import EventView, JobCost, JobDetail, JobRow, Launched, PreemptAccepted

SERVER_ENV = "SPOTRUN_SERVER"
TOKEN_ENV = "SPOTRUN_TOKEN"


class BackendError(RuntimeError):
    """A problem the command cannot get past; the message says what to fix."""


class Interrupted(BackendError):
    """Ctrl-C after the command stored what it was asked to (a job, a cancel), while it waited on: the message says
    what was stored (exit 130, as the shell's)."""


class Backend(Protocol):
    def launch(self, job_file: Path) -> Launched: ...

    def rows(self, job_id: int | None = None, *, ended: bool | None = None, limit: int | None = None) -> list[JobRow]:
        """One job's row, or the jobs' oldest first: ended or not (None: both), the newest `limit` (None: all)."""
        ...

    def detail(self, job_id: int) -> JobDetail: ...

    def events(self, job_id: int, after: int) -> list[EventView]: ...

    def log_stream(self, job_id: int, *, follow: bool) -> Iterator[str]: ...

    def cancel(self, job_id: int) -> bool:
        """Ask for the job to be cancelled; False when it had already ended."""
        ...

    def preempt(self, job_id: int, notice_seconds: float | None, node: int | None = None) -> PreemptAccepted: ...

    def cost(self, job_id: int) -> JobCost: ...

    def caller(self) -> str | None:
        """The owner the caller's own jobs carry: embedded, `local`; over a server, the user its token is, as its
        answers to `rows` and `detail` named them; None before one, or from a server older than that."""
        ...


def current_backend() -> Backend:
    """Remote when $SPOTRUN_SERVER names a server (with $SPOTRUN_TOKEN), else embedded."""
    named = server_and_token("ask the server's admin for a token")
    if named is None:
        from spotrun.cli.embedded import EmbeddedBackend

        return EmbeddedBackend()
    from spotrun.cli.remote import RemoteBackend

    return RemoteBackend(*named)


def server_and_token(without_token: str) -> tuple[str, str] | None:
    """$SPOTRUN_SERVER and $SPOTRUN_TOKEN; None when no server is named, BackendError (saying `without_token`) when
    a server is named without a token."""
    server = os.environ.get(SERVER_ENV, "").strip()
    if not server:
        return None
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise BackendError(f"{SERVER_ENV} is set to {server} but {TOKEN_ENV} is not; {without_token}")
    return server, token
