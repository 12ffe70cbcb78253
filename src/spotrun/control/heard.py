"""The agents' reports (heartbeats, exits, ...) this process's agent API received, whether or not the store could
record them.

The agent API writes each heartbeat to the store, and the controller judges an attempt lost from the newest one it
reads there. When the store cannot take writes for a while (SQLite locked by a stalled writer, past its busy
timeout), the heartbeats wait, then fail, while the controller's reads still see the old one: it took live
attempts for lost and placed their jobs again. The agent API and the controller of one process (the embedded
daemon, a team server) share this record: a report received is a sign of life however its write went
(`Controller.watched_since`). Kept in memory only, for the attempts heard lately: the store remains the record
every worker reads.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable

KEPT_SECONDS = 3600.0  # longer than any heartbeat or boot timeout a controller judges by


class HeardAgents:
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._heard: OrderedDict[int, float] = OrderedDict()  # attempt id -> when, the least recently heard first

    def heard(self, attempt_id: int) -> None:
        now = self._now()
        with self._lock:
            self._heard[attempt_id] = now
            self._heard.move_to_end(attempt_id)
            while self._heard and next(iter(self._heard.values())) < now - KEPT_SECONDS:
                self._heard.popitem(last=False)

    def last(self, attempt_id: int) -> float:
        """When the attempt's agent was last heard here; -inf when not lately."""
        with self._lock:
            return self._heard.get(attempt_id, -math.inf)
