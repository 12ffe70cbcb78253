"""Answers kept for a while: what a cloud lists or prices, asked again only once the answer is old.

A failed ask is not kept: the next caller asks again. One lock per cache: callers (a controller's workers) that want
the same answer while it is being asked wait for it instead of asking too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TtlCache(Generic[V]):
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._clock = clock
        self._kept: dict[Hashable, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value kept under `key`, or `make()`'s once it is `seconds` old (kept, unless `make` raised)."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and self._clock() - kept[0] < self._seconds:
                return kept[1]
            value = make()
            self._kept[key] = (self._clock(), value)
            return value
