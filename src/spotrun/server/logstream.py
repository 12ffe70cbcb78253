"""A job's logs as one text stream across its attempts, each attempt's start marked.

`spotrun logs` prints this stream from the store, and the team server sends the very same stream over HTTP, so the
two read alike. Attempt logs are the files the agent API appends to (`spotrun.control.logs`).
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from spotrun.control import jobs as jobs_api
from spotrun.control.logs import attempt_log_path
from spotrun.control.states import is_terminal
from spotrun.server.views import clock_time
from spotrun.state import Attempt, Store


class _AttemptReader:
    """Reads the new bytes of one attempt's log; decodes UTF-8 split across reads correctly."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read_new(self, final: bool) -> str:
        data = read_log(self.path, self.offset)
        self.offset += len(data)
        return self._decoder.decode(data, final=final)


def read_log(path: Path, offset: int) -> bytes:
    """The log's bytes from `offset` on (nothing when the file does not exist yet)."""
    if not path.exists():
        return b""
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read()


def job_log_stream(
    store: Store, job_id: int, *, follow: bool, poll: float = 0.3, sleep: Callable[[float], None] = time.sleep
) -> Iterator[str]:
    """Yield the job's log text; with `follow`, keep yielding until the job has ended. Raises JobNotFound first."""
    readers: dict[int, _AttemptReader] = {}
    while True:
        with store.session() as session:
            job = jobs_api.get_job(session, job_id)
            ended = is_terminal(job.state)
            multi_node = (job.spec.get("resources") or {}).get("nodes", 1) > 1
            attempts = [a for a in jobs_api.job_attempts(session, job_id) if a.started_at is not None]
        for attempt in attempts:
            if attempt.number not in readers:
                readers[attempt.number] = _AttemptReader(attempt_log_path(job_id, attempt.number))
                yield attempt_header(attempt, multi_node)
            text = readers[attempt.number].read_new(final=ended or not follow)
            if text:
                yield text
        if not follow or ended:
            return
        sleep(poll)


def attempt_header(attempt: Attempt, multi_node: bool = False) -> str:
    node = f" · node {attempt.node_rank}" if multi_node else ""
    return (
        f"──── attempt {attempt.number}{node} · {attempt.market} · {attempt.zone} · {attempt.instance_id} · "
        f"started {clock_time(attempt.started_at)} ────\n"
    )
