"""Answers kept for a while: what a cloud lists or prices, asked again only once the answer is old.

A failed ask is kept for `failure_seconds` (none by default: the next caller asks again), so that an answer that
cannot be had (no credentials, an outage) is not asked for at every placement. One lock per cache: callers (a
controller's workers) that want the same answer while it is being asked wait for it instead of asking too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TtlCache(Generic[V]):
    def __init__(
        self, seconds: float, clock: Callable[[], float] = time.monotonic, *, failure_seconds: float = 0.0,
    ) -> None:
        self._seconds = seconds
        self._failure_seconds = failure_seconds
        self._clock = clock
        self._kept: dict[Hashable, tuple[float, V]] = {}
        self._failed: dict[Hashable, tuple[float, Exception]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value kept under `key`, or `make()`'s once it is `seconds` old; what `make` raised is raised again
        for `failure_seconds` without asking."""
        with self._lock:
            failed = self._failed.get(key)
            if failed is not None and self._clock() - failed[0] < self._failure_seconds:
                raise failed[1]
            kept = self._kept.get(key)
            if kept is not None and self._clock() - kept[0] < self._seconds:
                return kept[1]
            try:
                value = make()
            except Exception as error:
                if self._failure_seconds > 0:
                    self._failed[key] = (self._clock(), error)
                raise
            self._failed.pop(key, None)
            self._kept[key] = (self._clock(), value)
            return value
