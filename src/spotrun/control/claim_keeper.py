"""A worker's claims kept alive while its tick runs.

A worker holds its jobs by claims with a time to live, renewed at each tick. A tick drives its jobs one after the
other, and one drive can take longer than a claim lives (a slow cloud call, a database busy with other writers);
renewing only between drives then let a claim lapse half-way through one, and another worker took the job over
while the first still acted on it. So the claims are renewed on a thread every third of their life while the tick
runs, and between two drives when the controller's clock says a third has passed (a manual or simulated clock moves
without real time passing). A drive that runs past `give_up_after` stops the renewals: a worker stuck that long lets
its jobs go.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

log = logging.getLogger("spotrun.controller")


class ClaimKeeper:
    def __init__(
        self, renew: Callable[[], None] | None, now: Callable[[], float], every: float, give_up_after: float
    ) -> None:
        """`renew` None: nothing to keep (a controller that is not one of several workers). `now`: the controller's
        clock, which the claims' times are in; `every` and `give_up_after` are seconds of it and of real time."""
        self._renew = renew
        self._now = now
        self._every = every
        self._give_up_after = give_up_after
        self._renewed_at = now()
        self._drive_began = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def drive_started(self) -> None:
        self._drive_began = time.monotonic()
        if self._renew is not None and self._now() - self._renewed_at > self._every:
            self._renew_now()

    def __enter__(self) -> ClaimKeeper:
        if self._renew is not None:
            self._thread = threading.Thread(target=self._keep, name="claim-keeper", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _renew_now(self) -> None:
        renewed_at = self._now()
        self._renew()
        self._renewed_at = renewed_at

    def _keep(self) -> None:
        while not self._stop.wait(self._every):
            if time.monotonic() - self._drive_began > self._give_up_after:
                continue  # stuck: let the claims lapse, so that another worker takes the jobs over
            try:
                self._renew_now()
            except Exception:  # a locked or unreachable store: the next renewal tries again
                log.warning("renewing the worker's claims failed", exc_info=True)
