"""Liveness: a heartbeat every interval carrying the newest committed local checkpoint step.

A heartbeat is not retried: the next one, a moment later, carries fresher news.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from spotrun.agent.client import ControllerClient

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(
        self,
        client: ControllerClient,
        interval: float,
        checkpoint_step: Callable[[], int | None],
        on_reply: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._client = client
        self._on_reply = on_reply
        self._interval = interval
        self._checkpoint_step = checkpoint_step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat_forever, name="spotrun-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _beat_forever(self) -> None:
        while not self._stop.is_set():
            try:
                step = self._checkpoint_step()
            except Exception:  # a checkpoint folder vanishing mid-read must not stop the heartbeat
                log.exception("cannot read the newest checkpoint step")
                step = None
            self._client.post("heartbeat", {"checkpoint_step": step}, retry=False, on_reply=self._on_reply)
            self._stop.wait(self._interval)
