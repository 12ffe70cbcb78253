"""Pure placement decisions: spot / on-demand / wait, and which zone. Time is an argument; no I/O."""

from spotrun.policy.baselines import GreedyPolicy, OnDemandPolicy
from spotrun.policy.deadline_aware import DeadlineAwarePolicy
from spotrun.policy.default import DefaultPolicy
from spotrun.policy.estimate_first import UntilEstimated
from spotrun.policy.observations import SpotLog
from spotrun.policy.placement import (
    Decision, GiveUp, Keep, Launch, PastAttempt, Placement, PlacementContext, PlacementPolicy, RunningDecision,
    StepPolicy, Wait, place_by_deciding,
)
from spotrun.policy.uniform_progress import UniformProgressPolicy
from spotrun.policy.zones import max_spot_price

_POLICIES = {
    "default": DefaultPolicy,
    "deadline_aware": DeadlineAwarePolicy,
    "greedy": GreedyPolicy,
    "on_demand": OnDemandPolicy,
    "uniform_progress": UniformProgressPolicy,
}
_PLANNERS = frozenset({"deadline_aware", "uniform_progress"})  # they need the job's compute: see estimate_first


def get_policy(name: str, **options: float) -> StepPolicy:
    try:
        factory = _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(sorted(_POLICIES))}") from None
    try:
        policy = factory(**options)
    except TypeError as error:
        raise ValueError(f"placement policy {name!r}: bad options {sorted(options)} ({error})") from None
    return UntilEstimated(policy) if name in _PLANNERS else policy


def policy_names() -> list[str]:
    return sorted(_POLICIES)


def markets_regardless(name: str) -> frozenset[str]:
    """The markets policy `name` may choose whatever the job's spot.use_spot and spot.fallback say (none: it follows
    them; so does a policy that does not declare any)."""
    return getattr(_POLICIES.get(name), "markets_regardless", frozenset())


def markets_conflict(name: str, use_spot: bool, fallback: str) -> str | None:
    """Why policy `name` would break the job's own market settings (spot with use_spot false, on-demand with
    fallback "wait"), or None when it keeps them."""
    taken = markets_regardless(name)
    if not use_spot and "spot" in taken:
        return f"policy {name!r} places the job on spot, but spot.use_spot is false (on-demand only)"
    if fallback == "wait" and "on-demand" in taken:
        return f"policy {name!r} runs the job on on-demand, but spot.fallback is 'wait' (never on-demand)"
    return None


__all__ = [
    "Decision", "DeadlineAwarePolicy", "DefaultPolicy", "GiveUp", "GreedyPolicy", "Keep", "Launch", "OnDemandPolicy",
    "PastAttempt", "Placement", "PlacementContext", "PlacementPolicy", "RunningDecision", "SpotLog", "StepPolicy",
    "UniformProgressPolicy", "Wait", "get_policy", "markets_conflict", "markets_regardless", "max_spot_price",
    "place_by_deciding", "policy_names",
]
