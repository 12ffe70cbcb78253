"""How each cloud turns the seconds an instance was held into seconds charged.

The rules, as the clouds publish them for Linux machines (spotrun's images):
- AWS: per second with a 60-second minimum. A spot instance that EC2 interrupts within its first hour is not charged
  at all; one the user stops or terminates is charged for its seconds, in the first hour too ("Billing for
  interrupted Spot Instances", EC2 user guide). EC2 reclaims an instance 2 minutes after its interruption notice.
- GCP: per second with a 1-minute minimum, spot or not.
- Azure: per second with a 1-minute minimum, spot or not (read in second-hand summaries of Azure's pricing pages).
- local (processes on this machine): the seconds held, nothing more.

A free interruption is worth waiting for: an instance whose interruption is announced inside the free window costs
nothing if the cloud takes it back, and its seconds if spotrun terminates it first (`control/reclaims.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class BillingRule:
    name: str = "per second"  # whose rule: GCP's and Azure's are the same numbers, not the same rule
    minimum_seconds: float = 0.0  # an instance held for less is charged this much
    free_if_reclaimed_within: float = 0.0  # a spot instance the cloud takes back this young is not charged
    notice_lead: float = 0.0  # seconds from the cloud's interruption notice to its taking the instance

    def charged_seconds(self, held: float, *, market: str, reclaimed: bool) -> float:
        """What the cloud charges for an instance held `held` seconds; `reclaimed`: the cloud took it back."""
        if held <= 0:
            return 0.0
        if market == "spot" and reclaimed and held < self.free_if_reclaimed_within:
            return 0.0
        return max(held, self.minimum_seconds)

    def expected_reclaim(self, notice_at: float, stated: float | None = None) -> float:
        """When the cloud will take an instance noticed at `notice_at`: the time its notice stated, not before the
        notice itself (a clock a little off), or this rule's lead after the notice where it stated none."""
        return max(stated, notice_at) if stated is not None else notice_at + self.notice_lead

    def reclaim_would_be_free(self, *, market: str, started_at: float, reclaim_at: float) -> bool:
        """Whether the cloud taking the instance at `reclaim_at` lands inside the free window."""
        return market == "spot" and reclaim_at - started_at < self.free_if_reclaimed_within


def stated_end(started_at: float | None, terminated_at: float, now: float) -> float:
    """The end to bill an instance to where the cloud states when it ended: that time, but not before the instance's
    start nor after now (the cloud's clock and spotrun's may disagree)."""
    return min(max(terminated_at, started_at if started_at is not None else terminated_at), now)


PER_SECOND = BillingRule()

CLOUD_RULES: Mapping[str, BillingRule] = {
    "aws": BillingRule("aws", minimum_seconds=60.0, free_if_reclaimed_within=3600.0, notice_lead=120.0),
    "gcp": BillingRule("gcp", minimum_seconds=60.0),
    "azure": BillingRule("azure", minimum_seconds=60.0),
    "local": PER_SECOND,
}


def rule_for(cloud: str, rules: Mapping[str, BillingRule] = CLOUD_RULES) -> BillingRule:
    return rules.get(cloud, PER_SECOND)
