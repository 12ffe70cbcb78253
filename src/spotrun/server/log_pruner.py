"""The server's own log retention (`spotrun server --keep-logs 30d`): `control.log_retention` at start and then every
hour, in a thread of its own so that a long prune never delays a controller tick or a request.

Several servers on one store may all prune: a second run at the same time waits for the first and finds nothing
left (`prune_logs` marks before it reads). A failed round (the store away) is logged and tried again next round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from spotrun.control.log_retention import PrunedLogs, prune_logs
from spotrun.state import Store

PRUNE_EVERY = 3600.0

log = logging.getLogger(__name__)


class LogPruner:
    def __init__(
        self, store: Store, keep_seconds: float, *, every: float = PRUNE_EVERY, clock: Callable[[], float] = time.time
    ) -> None:
        self.store, self.keep_seconds, self.every, self.clock = store, keep_seconds, every, clock
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.prune_once()
            except Exception:  # a bug must not end retention for the server's life: said, and tried next round
                log.exception("pruning logs failed, next try in %.0f s", self.every)
            self._stopped.wait(self.every)

    def stop(self) -> None:
        self._stopped.set()

    def prune_once(self) -> PrunedLogs | None:
        """One round; None when it failed (logged)."""
        now = self.clock()
        try:
            pruned = prune_logs(self.store, ended_before=now - self.keep_seconds, now=now)
        except (SQLAlchemyError, OSError) as error:
            log.warning("pruning logs failed, next try in %.0f s: %s", self.every, str(error).splitlines()[0])
            return None
        if pruned.attempts:
            log.info("removed the logs of %d attempt(s) of %d job(s), %d bytes: they ended over %.0f s ago",
                     pruned.attempts, pruned.jobs, pruned.bytes, self.keep_seconds)
        return pruned
