"""Each instance type's zones, asked of a cloud at most once in a while.

The controller asks a provider for an instance type's zones at every placement, and a job that waits for spot is
placed at every tick. The answer comes from listings that are large (GCP's aggregated machine types, Azure's
Resource SKUs of a location: megabytes) or two calls (EC2's offerings and zones), and it changes rarely: a zone
that goes away within the cache's life is refused at launch, and the placement moves on to another.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spotrun.ttl_cache import TtlCache

ZONES_CACHE_SECONDS = 600.0


class ZoneCache:
    def __init__(self, seconds: float = ZONES_CACHE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._cache: TtlCache[tuple[str, ...]] = TtlCache(seconds, clock)

    def zones(self, key: str, list_zones: Callable[[], list[str]]) -> list[str]:
        """The zones cached under `key`, or those `list_zones()` gives (kept, unless it raised) once they are old."""
        return list(self._cache.get(key, lambda: tuple(list_zones())))
