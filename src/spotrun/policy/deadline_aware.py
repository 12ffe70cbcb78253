"""placeholder"""
from dataclasses import dataclass
from spotrun.policy.uniform_progress import UniformProgressPolicy


@dataclass(frozen=True)
class DeadlineAwarePolicy(UniformProgressPolicy):
    name: str = "deadline_aware"
