"""Pure placement decisions: spot / on-demand / wait, and which zone. Time is an argument; no I/O."""

from spotrun.policy.default import DefaultPolicy
from spotrun.policy.placement import Decision, GiveUp, Launch, PastAttempt, PlacementContext, PlacementPolicy, Wait

_POLICIES = {"default": DefaultPolicy}


def get_policy(name: str, **options: float) -> PlacementPolicy:
    try:
        return _POLICIES[name](**options)
    except KeyError:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(sorted(_POLICIES))}") from None


def policy_names() -> list[str]:
    return sorted(_POLICIES)


__all__ = [
    "Decision", "DefaultPolicy", "GiveUp", "Launch", "PastAttempt", "PlacementContext", "PlacementPolicy", "Wait",
    "get_policy", "policy_names",
]
