"""Planning policies before the job's compute is known.

`uniform_progress` and `deadline_aware` plan from the deadline and the compute the job needs. A deadline job that
names no `estimated_duration` gets its compute from its trainer's step rate (`control.progress`), which needs the job
to run for a few minutes first. Until then it is placed as the default policy places a job without a deadline (spot,
zone by zone, on-demand once spot keeps failing), so that it runs and can be measured; then the planner takes over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotrun.policy.deadline import can_plan
from spotrun.policy.default import DefaultPolicy
from spotrun.policy.placement import Decision, PlacementContext, RunningDecision, StepPolicy


@dataclass(frozen=True)
class UntilEstimated:
    planner: StepPolicy
    before: DefaultPolicy = field(default_factory=DefaultPolicy)

    @property
    def name(self) -> str:
        return self.planner.name

    def place(self, ctx: PlacementContext) -> Decision:
        return self.planner.place(ctx) if can_plan(ctx) else self.before.place(ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        return self.planner.decide(ctx) if can_plan(ctx) else self.before.decide(ctx)
