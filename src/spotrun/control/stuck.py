"""A job the controller cannot drive: each tick that fails on it is logged, and the job's events say why, once per
cause, where its owner looks (`spotrun status ID`, `launch --follow`), not only in the controller's log."""

from __future__ import annotations

import logging
from collections.abc import Callable

from spotrun.state import Store, add_event

log = logging.getLogger(__name__)


class StuckJobs:
    """Remembers the last failure told for each job, so that a cause is told once, not at every tick."""

    def __init__(self, store: Store, now: Callable[[], float]) -> None:
        self._store = store
        self._now = now
        self._told: dict[int, str] = {}

    def failed(self, job_id: int, error: Exception) -> None:
        cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if self._told.get(job_id) == cause:
            log.debug("job %s: tick failed again: %s", job_id, cause)
            return
        log.exception("job %s: tick failed", job_id)
        self._told[job_id] = cause
        try:
            with self._store.session() as session:
                add_event(session, at=self._now(), kind="stuck", job_id=job_id,
                          message=f"the controller cannot go on with this job ({cause}); it tries again every tick")
        except Exception:  # the store itself may be what fails: the log has it
            log.exception("job %s: cannot record why its tick failed", job_id)

    def went_on(self, job_id: int) -> None:
        self._told.pop(job_id, None)
