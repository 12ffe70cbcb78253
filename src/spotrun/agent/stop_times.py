"""When a noticed trainer must have stopped, and when its final backup must be done.

With a deadline: the margin before the soonest deadline a notice named so far (a later notice may name a sooner
one), the margin being the time the agent's work after the kill needs: the sync margin (the final backup, then the
exit report), or on a gang's node, which backs nothing up, the exit report's part of it (`GangAgent._kill_margin`).
Without one: notice_grace after the agent answered the first notice; a SIGTERM's and the controller's stop carry that
grace as their deadline.

A deadline the cloud stated that had already passed when the agent answered (the notice seen late, or the
instance's clock ahead of the cloud's) means the cloud is late too, and the instance still runs. The trainer then
gets a few seconds anyway (`LATE_NOTICE_SECONDS`, or notice_grace if less), and the backup the margin after:
they may still save and back up, where a trainer killed at once cannot, and the cloud taking the instance meanwhile
loses nothing more than killing it would have. A stated deadline still ahead is kept, however close.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotrun.agent.notices import Notice, NoticeWatcher

LATE_NOTICE_SECONDS = 10.0


@dataclass(frozen=True)
class StopTimes:
    watcher: NoticeWatcher
    answered: Notice
    answered_at: float
    notice_grace: float
    margin: float

    def deadline(self) -> float | None:
        """When the final backup must be done, or None: the notices named no deadline."""
        notice = self.watcher.notice or self.answered
        if notice.deadline is None:
            return None
        if notice.own_grace or notice.deadline > self.answered_at:
            return notice.deadline
        late = self.answered_at + min(LATE_NOTICE_SECONDS, self.notice_grace) + self.margin
        own = self.answered.deadline if self.answered.own_grace else None  # a SIGTERM's grace still holds
        return late if own is None else min(late, own)

    def stop_by(self) -> float:
        """When the command must have stopped."""
        deadline = self.deadline()
        return self.answered_at + self.notice_grace if deadline is None else deadline - self.margin
