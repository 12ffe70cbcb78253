"""A simulated spot market: one availability trace per zone, cut into windows that start at chosen offsets."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from spotrun.traces import Trace, TraceError


@dataclass(frozen=True, eq=False)
class Market:
    """Zones with one trace each (same sample period); spot is available when a sample counts >= `nodes`."""

    zones: tuple[str, ...]
    available: np.ndarray  # bool, (zones, samples)
    gap_seconds: float

    @classmethod
    def from_traces(cls, traces: Mapping[str, Trace], nodes: int = 1) -> Market:
        if not traces:
            raise ValueError("a market needs at least one zone with a trace")
        gaps = {trace.gap_seconds for trace in traces.values()}
        if len(gaps) > 1:
            names = ", ".join(f"{zone}: {trace.gap_seconds:g} s" for zone, trace in traces.items())
            raise TraceError(f"the zones' traces have different sample periods ({names})")
        length = min(len(trace) for trace in traces.values())
        available = np.stack([trace.data[:length] >= nodes for trace in traces.values()])
        return cls(tuple(traces), available, gaps.pop())

    @property
    def samples(self) -> int:
        return self.available.shape[1]

    def window(self, start: int, length: int) -> np.ndarray:
        """Availability from sample `start` on, `length` samples (zones × samples)."""
        if start < 0 or start + length > self.samples:
            raise ValueError(f"window [{start}, {start + length}) is outside the trace's {self.samples} samples")
        return self.available[:, start : start + length]

    def starts(self, every_seconds: float, span_seconds: float) -> list[int]:
        """Sample offsets every `every_seconds` at which a window of `span_seconds` still fits in the traces."""
        if every_seconds <= 0:
            raise ValueError(f"start spacing must be positive, got {every_seconds}")
        every = max(1, round(every_seconds / self.gap_seconds))
        span = math.ceil(span_seconds / self.gap_seconds - 1e-9)
        return list(range(0, self.samples - span + 1, every))
