"""What a placement policy sees and what it may answer. Pure data: no I/O, time is an argument."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

Market = Literal["spot", "on-demand"]


@dataclass(frozen=True)
class PastAttempt:
    """One earlier try at running the job, as the controller recorded it."""

    zone: str
    market: Market
    created_at: float
    started_at: float | None  # None: never got an instance
    ended_at: float | None
    end_reason: str | None  # succeeded | failed | preempted | cancelled | lost | no_capacity | ...


@dataclass(frozen=True)
class PlacementContext:
    job_id: int
    now: float
    zones: tuple[str, ...]  # the zones the job may use, in the spec's (or provider's) order
    use_spot: bool
    fallback: Literal["on-demand", "wait"]
    submitted_at: float
    preemptions_before_fallback: int
    fallback_window: float
    capacity_rounds: int = 0  # how many times the job already waited because no zone had capacity
    history: tuple[PastAttempt, ...] = field(default_factory=tuple)
    deadline: float | None = None
    estimated_duration: float | None = None


@dataclass(frozen=True)
class Launch:
    zone: str
    market: Market
    reason: str


@dataclass(frozen=True)
class Wait:
    until: float
    reason: str


@dataclass(frozen=True)
class GiveUp:
    reason: str


Decision = Launch | Wait | GiveUp


class PlacementPolicy(Protocol):
    name: str

    def place(self, ctx: PlacementContext) -> Decision: ...
