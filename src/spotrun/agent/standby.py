"""A standby's hold: the agent of an attempt launched to take over from one still running (a make-before-break
move) reports in, then waits, restoring and running nothing, until a heartbeat's answer releases it; by then the
attempt it replaces has checkpointed and ended, so the restore brings that checkpoint."""

from __future__ import annotations

import threading
from typing import Any


class StandbyHold:
    def __init__(self, held: bool) -> None:
        self._released = threading.Event()
        if not held:
            self._released.set()

    def on_heartbeat_reply(self, reply: dict[str, Any]) -> None:
        if reply.get("hold") is False:  # only the controller's explicit word releases a standby
            self._released.set()

    @property
    def released(self) -> bool:
        return self._released.is_set()
