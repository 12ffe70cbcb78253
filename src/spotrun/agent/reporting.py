"""Lifecycle reports (started, notice, exit) delivered in order by one background thread.

Each report is retried until the controller gives a final answer, so a controller that is restarting
delays the reports but never loses them, and never blocks the agent's own work (running the trainer,
answering a preemption notice).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from spotrun.agent.client import ControllerClient, Delivery

log = logging.getLogger(__name__)

AnswerCallback = Callable[[Delivery], None]


class Reporter:
    def __init__(self, client: ControllerClient) -> None:
        self._client = client
        self._queue: queue.Queue[tuple[str, dict[str, Any], AnswerCallback | None]] = queue.Queue()
        self._pending = 0
        self._idle = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._deliver_forever, name="spotrun-reporter", daemon=True)

    def start(self) -> Reporter:
        self._thread.start()
        return self

    def send(self, endpoint: str, body: dict[str, Any], on_answer: AnswerCallback | None = None) -> None:
        """Queue a report; it is delivered after every report queued before it. on_answer runs in the
        reporter's thread once the controller answered (delivered, conflict or rejected)."""
        with self._idle:
            self._pending += 1
        self._queue.put((endpoint, body, on_answer))

    def wait_delivered(self, timeout: float | None = None) -> bool:
        """Block until every queued report got a final answer; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _deliver_forever(self) -> None:
        while not self._stop.is_set():
            try:
                endpoint, body, on_answer = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            delivery = self._client.post(endpoint, body, stop=self._stop)
            if delivery is Delivery.DELIVERED:
                log.info("reported %s", endpoint)
            if on_answer is not None and delivery.final:
                try:
                    on_answer(delivery)
                except Exception:
                    log.exception("handling the answer to %s failed", endpoint)
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()
