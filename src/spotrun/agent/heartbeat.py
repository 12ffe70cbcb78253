"""Liveness: a heartbeat every interval carrying the newest committed checkpoint's step (and the run's total steps,
when the SDK wrote them into its manifest).

A heartbeat is not retried: the next one, a moment later, carries fresher news.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotrun.agent.client import ControllerClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointProgress:
    step: int  # steps done by the newest committed checkpoint
    total_steps: int | None  # steps of the whole run, from its manifest (None: the SDK was not told)
    save_seconds: float | None = None  # how long its save took, from its manifest (None: not timed)


class Heartbeat:
    def __init__(
        self,
        client: ControllerClient,
        interval: float,
        checkpoint_progress: Callable[[], CheckpointProgress | None],
        on_reply: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._client = client
        self._on_reply = on_reply
        self._interval = interval
        self._checkpoint_progress = checkpoint_progress
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
                progress = self._checkpoint_progress()
            except Exception:  # a checkpoint folder vanishing mid-read must not stop the heartbeat
                log.exception("cannot read the newest checkpoint step")
                progress = None
            body: dict[str, int | None] = {"checkpoint_step": progress.step if progress else None}
            if progress is not None and progress.total_steps is not None:
                body["total_steps"] = progress.total_steps
            self._client.post("heartbeat", body, retry=False, on_reply=self._take_reply)
            self._stop.wait(self._interval)

    def _take_reply(self, reply: dict[str, Any]) -> None:
        """An answer that cannot be handled (a malformed field, a bug) is logged and skipped: a heartbeat thread that
        ended would leave the controller taking the agent for lost."""
        self._client.learn_controllers(reply.get("controllers"))  # where to report should this worker go
        if self._on_reply is None:
            return
        try:
            self._on_reply(reply)
        except Exception:
            log.exception("cannot handle the controller's answer to a heartbeat: %r", reply)
