"""Why a job failed when its last failure was a start failure (the instance never started the agent): said with
the tail of the last boot's output, which was otherwise only in each attempt's end event."""

from __future__ import annotations

from sqlalchemy import select

from spotrun.control.wording import times
from spotrun.state import Attempt, Event

DATA_KEY = "start_failure"  # in an attempt_ending event's data: what the provider said of the failed start
TAIL_LINES = 20
TAIL_CHARS = 2000


def ending_data(start_failure: str | None) -> dict[str, str] | None:
    """The data an attempt_ending event keeps of a start failure."""
    return {DATA_KEY: start_failure} if start_failure else None


def job_failure_reason(session, attempt: Attempt, failures: int, limit: int, where: str) -> str | None:
    """The job's final reason when `attempt`, the failure that went past max_restarts_on_error (`limit`), was a
    start failure; None when it was not. `where`: the failed instance, as the user knows it."""
    starts = _start_failures(session, attempt.job_id)
    last = starts.get(attempt.id)
    if last is None:
        return None
    if len(starts) >= failures:
        head = f"the agent could not be started {times(failures)} (max_restarts_on_error={limit})"
    else:
        head = (f"failed {times(failures)} (max_restarts_on_error={limit}), {len(starts)} of them because the agent "
                "could not be started")
    return f"{head}; the last, on {where}: {tail(last)}"


def tail(text: str) -> str:
    """The last TAIL_LINES lines of `text`, and of those at most the last TAIL_CHARS characters; "…" where cut."""
    lines = text.splitlines()
    kept = "\n".join(lines[-TAIL_LINES:])
    if len(kept) > TAIL_CHARS:
        kept = kept[-TAIL_CHARS:]
    return kept if kept == text else "…" + kept


def _start_failures(session, job_id: int) -> dict[int, str]:
    """The job's attempts that ended in a start failure, each with what the provider said of it."""
    endings = session.scalars(
        select(Event).where(Event.job_id == job_id, Event.kind == "attempt_ending").order_by(Event.id)
    )
    return {
        event.attempt_id: event.data[DATA_KEY]
        for event in endings if event.attempt_id is not None and event.data and event.data.get(DATA_KEY)
    }
