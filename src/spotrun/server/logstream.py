"""A job's logs as one text stream across its attempts, each attempt's start marked.

`spotrun logs` prints this stream from the store, and the team server sends the very same stream over HTTP, so the
two read alike. Attempt logs are the chunks the agent API stores (`spotrun.control.logs`).
"""

from __future__ import annotations

import codecs
import time
from datetime import datetime, timezone
from collections.abc import AsyncIterator, Callable, Iterator
import anyio
from sqlalchemy.orm import Session

from spotrun.api_models import STREAM_REVOKED
from spotrun.control import jobs as jobs_api
from spotrun.control.logs import read_log
from spotrun.control.states import is_terminal
from spotrun.state import Attempt, Store


class _AttemptReader:
    """Reads the new bytes of one attempt's log; decodes UTF-8 split across reads correctly."""

    def __init__(self) -> None:
        self.offset = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read_new(self, session: Session, attempt: Attempt, final: bool) -> str:
        data = read_log(session, attempt, self.offset)
        self.offset += len(data)
        return self._decoder.decode(data, final=final)


class JobLogFollower:
    """The job's log text poll by poll: each `poll` reads what the attempts wrote since the last one."""

    def __init__(self, store: Store, job_id: int, *, follow: bool) -> None:
        self.store, self.job_id, self.follow = store, job_id, follow
        self._readers: dict[int, _AttemptReader] = {}
        self._last_shown: int | None = None  # the attempt whose text was shown last

    def poll(self) -> tuple[list[str], bool]:
        """The text read now, headers included, and whether the stream is over. Raises JobNotFound."""
        pieces: list[str] = []
        with self.store.session() as session:
            job = jobs_api.get_job(session, self.job_id)
            ended = is_terminal(job.state)
            multi_node = (job.spec.get("resources") or {}).get("nodes", 1) > 1
            for attempt in jobs_api.job_attempts(session, self.job_id):
                if attempt.started_at is not None:
                    pieces += self._read(session, attempt, multi_node, final=ended or not self.follow)
        return pieces, not self.follow or ended

    def _read(self, session: Session, attempt: Attempt, multi_node: bool, final: bool) -> list[str]:
        pieces = []
        reader = self._readers.get(attempt.number)
        if reader is None:
            reader = self._readers[attempt.number] = _AttemptReader()
            pieces.append(attempt_header(attempt, multi_node))
            if attempt.log_pruned_at is not None:
                pieces.append(pruned_line(attempt))
            self._last_shown = attempt.number
        text = reader.read_new(session, attempt, final)
        if text:
            if self._last_shown != attempt.number:  # attempts that run at once (a gang's nodes, a standby)
                pieces.append(attempt_header(attempt, multi_node, again=True))
                self._last_shown = attempt.number
            pieces.append(text)
        return pieces


def job_log_stream(
    store: Store, job_id: int, *, follow: bool, poll: float = 0.3, sleep: Callable[[float], None] = time.sleep
) -> Iterator[str]:
    """Yield the job's log text; with `follow`, keep yielding until the job has ended. Raises JobNotFound first."""
    follower = JobLogFollower(store, job_id, follow=follow)
    while True:
        pieces, over = follower.poll()
        yield from pieces
        if over:
            return
        sleep(poll)


async def job_log_stream_async(
    store: Store, job_id: int, *, follow: bool, still_allowed: Callable[[], bool], poll: float = 0.3
) -> AsyncIterator[str]:
    """The same stream for the server. Between polls it holds no thread (a sync stream held one of the server's
    40 for as long as a quiet job ran, even after its client left: 40 followers hung the agents' API), and it ends
    once the client is gone (cancelled) or `still_allowed` says no (the token that opened it was revoked)."""
    follower = JobLogFollower(store, job_id, follow=follow)
    while True:
        pieces, over = await anyio.to_thread.run_sync(follower.poll)
        for piece in pieces:
            yield piece
        if over:
            return
        await anyio.sleep(poll)
        if not await anyio.to_thread.run_sync(still_allowed):
            yield STREAM_REVOKED
            return


def pruned_line(attempt: Attempt) -> str:
    """What stands for a log that log retention removed (the dashboard's log view writes the same). The store does
    not keep which of the two removed it, `spotrun prune-logs` or a server's --keep-logs: the line names both."""
    day = datetime.fromtimestamp(attempt.log_pruned_at or 0, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"[its log of {attempt.log_bytes} bytes was removed on {day} by log retention "
            "(`spotrun prune-logs` or the server's --keep-logs)]\n")


def utc_time(at: float | None) -> str:
    """A moment as the log stream writes it: the server writes the stream and the user reads it in another zone,
    so it names its own (UTC), with the date (a job can run for days), as `pruned_line` does."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if at else "—"


def attempt_header(attempt: Attempt, multi_node: bool = False, again: bool = False) -> str:
    """The line that marks an attempt's text: its start, or (`again`) its text going on after another's."""
    node = f" · node {attempt.node_rank}" if multi_node else ""
    if again:
        return f"──── attempt {attempt.number}{node} (continued) ────\n"
    return (
        f"──── attempt {attempt.number}{node} · {attempt.market} · {attempt.zone} · {attempt.instance_id} · "
        f"started {utc_time(attempt.started_at)} ────\n"
    )
