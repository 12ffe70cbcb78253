"""spotrun's deadline-aware policy: each step, the choice (spot / on-demand / nothing) with the least expected cost
of finishing by the deadline, under a model of spot fitted to what has been seen so far in which a run of
availability (or a gap) is the likelier to go on the longer it has lasted (see `run_ages` and `markov`).

Compared with Uniform Progress it does not follow a fixed progress line: it waits through a gap when the slack
left makes waiting cheap (a fresh gap usually closes soon), covers a gap with on-demand once it has gone on long,
leaves on-demand for spot only when the expected life of spot of that age pays for the two restarts that may
follow (hysteresis sized by the restart overhead), and stops taking spot that keeps dying young (the preemption
loop). With several zones it launches spot in the zone whose spot has lasted longest. The deadline is never
risked: a plan that on-demand could not rescue has infinite cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotrun.policy.deadline import DeadlineView, deadline_view
from spotrun.policy.markov import JobShape, chain_state, option_values, value_table
from spotrun.policy.observations import SpotLog
from spotrun.policy.placement import Decision, Keep, PlacementContext, RunningDecision, Wait, place_by_deciding
from spotrun.policy.requests import no_zone, want_nothing, want_on_demand, want_spot
from spotrun.policy.run_ages import AGE_BUCKETS, RunHazards, current_age, estimate_hazards
from spotrun.policy.zones import longest_lived_zone

P3_2XLARGE_SPOT_RATIO = 0.9731 / 3.06
CHOICE_ORDER = ("idle", "spot", "on-demand")  # tie-break after "keep what is held"


@dataclass(frozen=True)
class DeadlineAwarePolicy:
    name: str = "deadline_aware"
    prior_mean_up: float = 2 * 3600.0  # seconds spot is assumed to last before anything is seen
    prior_mean_down: float = 3600.0  # seconds a gap is assumed to last
    prior_runs: float = 12.0  # weight of that prior, in runs (12: chosen leave-one-trace-out, docs/benchmarks.md)
    planning_step: float = 600.0  # the step the plan is made in when the caller does not give one

    def place(self, ctx: PlacementContext) -> Decision:
        return place_by_deciding(self, ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        if (refusal := no_zone(ctx)) is not None:
            return refusal
        view = deadline_view(ctx)
        if view is None:
            raise ValueError(f"{self.name} needs the job's deadline and estimated_duration")
        step = ctx.step if ctx.step is not None else self.planning_step
        if view.finished:
            return Keep("work done") if ctx.current is not None else Wait(ctx.now + step, "work done")
        steps_left = int(math.floor((view.deadline - view.now) / step + 1e-9))
        if steps_left <= 0:
            return want_on_demand(ctx, "past the deadline: on-demand to finish as soon as possible")
        choice, why = self._choose(ctx, view, step, steps_left)
        if choice == "spot":
            answer = want_spot(ctx, why, pick=longest_lived_zone)
            if answer is not None:
                return answer
            choice = "on-demand"
        if choice == "on-demand":
            return want_on_demand(ctx, why)
        return want_nothing(ctx, step, why)

    def _choose(self, ctx: PlacementContext, view: DeadlineView, step: float, steps_left: int) -> tuple[str, str]:
        unit = _progress_unit(step, view.overhead)
        shape = JobShape.of(
            step, view.compute, view.deadline - view.started, view.overhead,
            ctx.on_demand_price or 1.0, ctx.spot_price or (ctx.on_demand_price or 1.0) * P3_2XLARGE_SPOT_RATIO, unit,
        )
        log = ctx.spot_log()
        hazards = estimate_hazards(
            log, ctx.zones, step, self.prior_mean_up / step, self.prior_mean_down / step, self.prior_runs
        )
        held = ctx.current.market if ctx.current is not None else None
        age = 0
        if ctx.current is not None:
            age = min(max(round((ctx.now - ctx.current.since) / step), 1), shape.ages)
        work_left = min(math.ceil(view.work_left / unit - 1e-9), shape.goal)
        state = _availability_state(ctx, log, hazards, step)
        values = option_values(
            value_table(shape, hazards), hazards, min(steps_left, shape.steps), work_left, held, age, state,
        )
        best = min(values, key=lambda c: (values[c], c != held, CHOICE_ORDER.index(c)))
        if math.isinf(values[best]):
            return "on-demand", "no plan keeps the deadline for sure: on-demand"
        spot_life, gap = hazards.mean_run(True) * step / 3600, hazards.mean_run(False) * step / 3600
        return best, f"least expected cost ({best}; fresh spot lasts ~{spot_life:.1f} h, fresh gaps ~{gap:.1f} h)"


def _availability_state(ctx: PlacementContext, log: SpotLog, hazards: RunHazards, step: float) -> int:
    """The chain state of spot now: up or down, and the age of the run going on, in steps.

    Up: the oldest run of availability among the zones known to have spot (the likeliest to last). Down everywhere:
    the youngest gap (the likeliest to close). Not known anywhere (the live controller's view between its launches):
    up and old, as a launch costs nothing when refused and tells the truth; without that, spot of unknown state would
    look like spot that just came back, likely to die, and the policy would stop trying it.
    """
    known = {zone: ctx.spot_known_now(zone) for zone in ctx.zones}
    if True in known.values():
        lives = [
            current_age(log.zone(z).since, ctx.now, step) for z, up in known.items() if up and log.zone(z).available
        ]
        return chain_state(hazards, True, max(lives, default=1))
    if None in known.values():
        return chain_state(hazards, True, AGE_BUCKETS[-1])
    gaps = [current_age(log.zone(z).since, ctx.now, step) for z in ctx.zones if log.zone(z).available is False]
    return chain_state(hazards, False, min(gaps, default=1))


def _progress_unit(step: float, overhead: float) -> float:
    """Progress is counted in units that both the step and the restart overhead are whole multiples of."""
    whole_step, whole_overhead = round(step), round(overhead)
    if abs(step - whole_step) > 1e-6 or abs(overhead - whole_overhead) > 1e-6 or whole_step <= 0:
        return step / 60
    return float(math.gcd(whole_step, whole_overhead)) if whole_overhead else float(whole_step)

