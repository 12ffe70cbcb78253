"""Whether a preemption's final checkpoint would be backed up in time.

At a notice the trainer saves at the end of its step and the agent uploads that checkpoint; both must be done
before the cloud takes the instance (EC2: 120 s after its notice; GCE and Azure Spot: 30 s; a notice with no
deadline, such as a Kubernetes pod's SIGTERM: the job's notice_grace). Each periodic checkpoint tells how long a
save and its upload take here: the SDK writes the save's duration into the manifest (``save_seconds``) and the
agent times the upload. The first checkpoint whose two together exceed the time a notice leaves is reported
once per attempt: a preemption would then resume from an older checkpoint and redo the steps since.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SaveBudget:
    seconds: float  # what a notice leaves for the final save and its upload
    notice: str  # the notice it is counted against


def budget_for(sources: Sequence[Any], notice_grace: float) -> SaveBudget:
    """The shortest fixed notice among ``sources`` (the cloud's), else the grace a notice without deadline gets."""
    fixed = [(source.notice_seconds, source.name) for source in sources if getattr(source, "notice_seconds", None)]
    if fixed:
        seconds, name = min(fixed)
        return SaveBudget(seconds, name)
    return SaveBudget(notice_grace, "notice without deadline (spot.notice_grace)")


class SlowSaveCheck:
    """Called with each checkpoint the agent backed up; ``report(body)`` once, for the first one that would not
    make it, with the numbers."""

    def __init__(self, budget: SaveBudget, report: Callable[[dict[str, Any]], None]) -> None:
        self.budget = budget
        self._report = report
        self._reported = False

    def checked(self, step: int, save_seconds: float | None, upload_seconds: float) -> None:
        """Checkpoint ``step`` took ``save_seconds`` to save (None: not timed, e.g. a framework's own checkpoint) and
        ``upload_seconds`` to back up (0 when the trainer wrote it to the store itself, as a gang's ranks do)."""
        needed = (save_seconds or 0.0) + upload_seconds
        if self._reported or needed <= self.budget.seconds:
            return
        self._reported = True
        log.warning("checkpoint %d took %.1f s to save and %.1f s to back up; a %s leaves %.0f s",
                    step, save_seconds or 0.0, upload_seconds, self.budget.notice, self.budget.seconds)
        self._report({"checkpoint_step": step, "save_seconds": save_seconds, "upload_seconds": round(upload_seconds, 3),
                      "budget_seconds": self.budget.seconds, "notice": self.budget.notice})
