"""A stop asked by the controller (e.g. to move the job to a better placement): handled like a preemption
notice, so the trainer checkpoints and the attempt ends cleanly. It arrives in a heartbeat's answer."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from spotrun.agent.notices import Notice


class ControllerStopNotice:
    name = "controller"

    def __init__(self, grace: float, clock: Callable[[], float] = time.time) -> None:
        self._grace = grace
        self._clock = clock
        self._requested: tuple[float, str] | None = None

    def on_heartbeat_reply(self, reply: dict[str, Any]) -> None:
        reason = reply.get("stop")
        if reason and self._requested is None:
            self._requested = (self._clock(), str(reason))

    def poll(self) -> Notice | None:
        if self._requested is None:
            return None
        asked_at, reason = self._requested
        return Notice(self.name, asked_at + self._grace, f"the controller asked to stop: {reason}", own_grace=True)
