"""When a noticed trainer must have stopped, and when its final backup must be done.

With a deadline: the sync margin before the soonest deadline a notice named so far (a later notice may name a
sooner one). Without one (a SIGTERM, the controller's stop): notice_grace after the agent answered the first notice.

A deadline already past when the agent answered (the notice seen late, or the instance's clock ahead of the
cloud's) means the cloud is late too, and the instance still runs. The trainer then gets a few seconds anyway
(`LATE_NOTICE_SECONDS`, or notice_grace if less): it may still save and back up, where one killed at once cannot,
and the cloud taking the instance meanwhile loses nothing more than killing it would have.
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
    sync_margin: float

    def deadline(self) -> float | None:
        """When the final backup must be done, or None: the notices named no deadline."""
        notice = self.watcher.notice or self.answered
        if notice.deadline is None:
            return None
        earliest_stop = self.answered_at + min(LATE_NOTICE_SECONDS, self.notice_grace)
        return max(notice.deadline, earliest_stop + self.sync_margin)

    def stop_by(self) -> float:
        """When the command must have stopped."""
        deadline = self.deadline()
        return self.answered_at + self.notice_grace if deadline is None else deadline - self.sync_margin
