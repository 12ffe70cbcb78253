"""The local cloud's spot markets: when spot capacity exists and when a running spot instance is taken back.

The market is persisted as <root>/market.json so that the provider (launch-time capacity) and every VM
process (reclaims, checked a few times a second) replay the same one. On-demand is always available.

- ``manual``: spot always available; reclaims only through ``LocalProvider.preempt``.
- ``random``: spot always available; each spot instance gets its notice after an exponentially
  distributed lifetime (mean ``mean_lifetime_seconds``), drawn from a generator seeded with
  ``(seed, instance id)``, so a run is reproducible.
- ``trace``: one availability trace per zone replayed at ``speed`` trace seconds per real second;
  sample ``offset`` is current at real time ``start_epoch``, and the replay loops at the end. A zone
  whose sample is 0 refuses spot launches, and its running spot instances get the notice. Without a
  ``start_epoch`` the market stands still at sample ``offset`` until the provider's first launch request,
  which starts the clock (so a replay lines up with a job however long its submission took).

In every market a reclaim happens ``notice_seconds`` (real seconds) after the notice.
"""

from __future__ import annotations

import functools
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from spotrun.providers.local.records import write_json_atomic
from spotrun.traces import Trace, bundled_zone_traces, load_trace

ZONES = ("local-a", "local-b", "local-c")
DEFAULT_NOTICE_SECONDS = 5.0
MARKET_FILE = "market.json"


class MarketError(ValueError):
    """A market setting that cannot be used."""


class _MarketBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    notice_seconds: float = Field(default=DEFAULT_NOTICE_SECONDS, ge=0, le=3600)  # as `spotrun preempt --notice`

    def spot_available(self, zone: str, now: float) -> bool:
        return True

    def notice_due(self, instance_id: str, zone: str, launched_at: float, now: float) -> bool:
        """Whether the cloud wants this running spot instance back at `now` (the notice starts)."""
        return False


class ManualMarket(_MarketBase):
    kind: Literal["manual"] = "manual"


class RandomMarket(_MarketBase):
    kind: Literal["random"] = "random"
    mean_lifetime_seconds: float = Field(gt=0, le=10 * 365 * 86400.0)
    seed: int = 0

    def lifetime_seconds(self, instance_id: str) -> float:
        """Seconds from launch to the notice; the same for the same (seed, instance id) in every process."""
        return random.Random(f"{self.seed}:{instance_id}").expovariate(1.0 / self.mean_lifetime_seconds)

    def notice_due(self, instance_id: str, zone: str, launched_at: float, now: float) -> bool:
        return now >= launched_at + self.lifetime_seconds(instance_id)


class TraceMarket(_MarketBase):
    kind: Literal["trace"] = "trace"
    traces: dict[str, str]  # zone -> trace file; a zone without one has no spot capacity
    speed: float = Field(default=600.0, gt=0, le=1e6)  # trace seconds per real second
    start_epoch: float | None = Field(default=None, allow_inf_nan=False)  # real UNIX time at which sample `offset` is current; None: not started
    offset: int = Field(default=0, ge=0)

    @property
    def started(self) -> bool:
        return self.start_epoch is not None

    def trace(self, zone: str) -> Trace | None:
        path = self.traces.get(zone)
        return _cached_trace(path, _mtime_ns(path)) if path is not None else None

    def trace_seconds(self, trace: Trace, now: float) -> float:
        elapsed = 0.0 if self.start_epoch is None else now - self.start_epoch
        return self.offset * trace.gap_seconds + elapsed * self.speed

    def started_at(self, now: float) -> TraceMarket:
        """This market with its clock started at `now` (itself when it already runs)."""
        return self if self.started else self.model_copy(update={"start_epoch": now})

    def spot_available(self, zone: str, now: float) -> bool:
        trace = self.trace(zone)
        return trace is not None and trace.available(self.trace_seconds(trace, now))

    def notice_due(self, instance_id: str, zone: str, launched_at: float, now: float) -> bool:
        return not self.spot_available(zone, now)


Market = Annotated[ManualMarket | RandomMarket | TraceMarket, Field(discriminator="kind")]
_MARKET_ADAPTER: TypeAdapter[Market] = TypeAdapter(Market)


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        raise MarketError(f"trace file {path} of the trace market does not exist") from None


@functools.lru_cache(maxsize=64)
def _cached_trace(path: str, mtime_ns: int) -> Trace:  # mtime_ns is part of the key: an edited file reloads
    return load_trace(path)


def trace_market(
    traces: Sequence[str | os.PathLike[str]] | Mapping[str, str | os.PathLike[str]] | None = None,
    *,
    speed: float = 600.0,
    start_epoch: float | None = None,
    offset: int = 0,
    notice_seconds: float = DEFAULT_NOTICE_SECONDS,
    clock_starts_at_first_launch: bool = False,
) -> TraceMarket:
    """A trace market; a list of files is mapped to local-a, local-b, local-c in order; None = bundled traces.

    Its clock starts at `start_epoch` (default: now), or with `clock_starts_at_first_launch` at the local
    provider's first launch request.

    Every file is validated now, so a bad one fails here rather than in a VM.
    """
    if traces is None:
        by_zone: Mapping[str, str | os.PathLike[str]] = bundled_zone_traces()
    elif isinstance(traces, Mapping):
        by_zone = traces
    else:
        if len(traces) > len(ZONES):
            raise MarketError(f"{len(traces)} trace files for {len(ZONES)} zones ({', '.join(ZONES)})")
        by_zone = dict(zip(ZONES, traces))
    unknown = sorted(set(by_zone) - set(ZONES))
    if unknown:
        raise MarketError(f"trace for unknown zone(s) {', '.join(unknown)}; zones are {', '.join(ZONES)}")
    resolved = {zone: str(Path(path).resolve()) for zone, path in by_zone.items()}
    for path in resolved.values():
        load_trace(path)
    if clock_starts_at_first_launch and start_epoch is not None:
        raise MarketError("a trace market's clock starts either at start_epoch or at the first launch, not both")
    if start_epoch is None and not clock_starts_at_first_launch:
        start_epoch = time.time()
    return TraceMarket(
        traces=resolved,
        speed=speed,
        start_epoch=start_epoch,
        offset=offset,
        notice_seconds=notice_seconds,
    )


def market_file(root: Path) -> Path:
    return root / MARKET_FILE


def set_market(root: str | os.PathLike[str], market: Market) -> None:
    """Make `market` the one the local cloud under `root` replays (running VMs pick it up within a second)."""
    write_json_atomic(market_file(Path(root)), market.model_dump(mode="json"))


def load_market(root: str | os.PathLike[str]) -> Market:
    """The market under `root`; the manual market when none was set."""
    path = market_file(Path(root))
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return ManualMarket()
    try:
        return _MARKET_ADAPTER.validate_json(text)
    except ValidationError as error:
        raise MarketError(f"{path}: invalid market ({error})") from None


def parse_market(document: Mapping[str, object]) -> Market:
    """A market from its JSON form, e.g. {"kind": "random", "mean_lifetime_seconds": 60}."""
    try:
        return _MARKET_ADAPTER.validate_python(document)
    except ValidationError as error:
        raise MarketError(f"invalid market: {error}") from None


@dataclass(frozen=True)
class TraceWindow:
    offset: int  # the sample to start the replay at
    preemption_seconds: list[float]  # real seconds after the start when the zone turns 0 (within the window)


def find_preemption_window(
    trace: Trace | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    preemptions: int,
    window_seconds: float,
    speed: float,
    *,
    first_after_seconds: float = 0.0,
    min_spacing_seconds: float = 0.0,
    nodes: int = 1,
) -> TraceWindow:
    """The earliest start offset at which the trace has capacity and then turns 0 at least `preemptions` times.

    `trace` is a Trace, a trace file, or the trace files of a trace market (the first one, local-a's, counts).

    Times are real seconds of a replay at `speed` trace seconds per real second. Counted 1->0 transitions
    lie in [first_after_seconds, window_seconds) and are at least `min_spacing_seconds` apart (so a job
    has time to come back between two of them). Raises MarketError when no offset fits.
    """
    if preemptions < 1 or window_seconds <= 0 or speed <= 0:
        raise MarketError("preemptions must be >= 1, window_seconds and speed > 0")
    if isinstance(trace, Sequence) and not isinstance(trace, str):
        if not trace:
            raise MarketError("no trace files given")
        trace = trace[0]
    loaded = trace if isinstance(trace, Trace) else load_trace(trace)
    length = len(loaded)
    seconds_per_sample = loaded.gap_seconds / speed
    # The replay loops: lay enough copies end to end to cover a window starting at the last sample.
    copies = math.ceil(window_seconds * speed / loaded.duration_seconds) + 1
    transitions = Trace(loaded.gap_seconds, np.tile(loaded.data, copies)).preemption_indices(nodes)
    for offset in range(length):
        if loaded.data[offset] < nodes:
            continue
        times = _spaced_times(
            (transitions[transitions > offset] - offset) * seconds_per_sample,
            first_after_seconds,
            window_seconds,
            min_spacing_seconds,
        )
        if len(times) >= preemptions:
            return TraceWindow(offset=offset, preemption_seconds=times)
    raise MarketError(
        f"{loaded.source or 'trace'}: no start offset gives {preemptions} preemptions within {window_seconds} s "
        f"at speed {speed} (first after {first_after_seconds} s, {min_spacing_seconds} s apart)"
    )


def _spaced_times(candidates: Sequence[float], first_after: float, window: float, spacing: float) -> list[float]:
    chosen: list[float] = []
    for moment in candidates:
        if moment >= window:
            break
        if moment >= first_after and (not chosen or moment - chosen[-1] >= spacing):
            chosen.append(float(moment))
    return chosen
