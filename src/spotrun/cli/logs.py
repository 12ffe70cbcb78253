"""`spotrun logs`: the attempts' logs as one stream, each attempt's start marked."""

from __future__ import annotations

import time
from typing import TextIO

from spotrun.cli.views import clock_time
from spotrun.control import jobs as jobs_api
from spotrun.control.logs import attempt_log_path
from spotrun.control.states import is_terminal
from spotrun.state import Store


def print_logs(store: Store, job_id: int, out: TextIO, *, follow: bool, poll: float = 0.3) -> None:
    printed: dict[int, int] = {}  # attempt number -> bytes already printed
    while True:
        with store.session() as session:
            job = jobs_api.get_job(session, job_id)
            ended = is_terminal(job.state)
            attempts = [a for a in jobs_api.job_attempts(session, job_id) if a.started_at is not None]
        for attempt in attempts:
            if attempt.number not in printed:
                out.write(
                    f"──── attempt {attempt.number} · {attempt.market} · {attempt.zone} · {attempt.instance_id} · "
                    f"started {clock_time(attempt.started_at)} ────\n"
                )
                printed[attempt.number] = 0
            printed[attempt.number] += _copy_new(attempt_log_path(job_id, attempt.number), printed[attempt.number], out)
        out.flush()
        if not follow or ended:
            return
        time.sleep(poll)


def _copy_new(path, offset: int, out: TextIO) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    out.write(data.decode(errors="replace"))
    return len(data)
