"""spotrun's deadline-aware policy: each step, the choice (spot / on-demand / nothing) with the least expected cost
of finishing by the deadline, under a model of spot fitted to what has been seen so far in which a run of
availability (or a gap) is the likelier to go on the longer it has lasted (see `run_ages` and `markov`).

Compared with Uniform Progress it does not follow a fixed progress line: it waits through a gap when the slack
left makes waiting cheap (a fresh gap usually closes soon), covers a gap with on-demand once it has gone on long,
leaves on-demand for spot only when the expected life of spot of that age pays for the two restarts that may
follow (hysteresis sized by the restart overhead), and stops taking spot that keeps dying young (the preemption
loop). Each step it idles is charged a little in the plan (never billed), so that slack is not spent on waits the
fitted model only just finds worth it. With several zones it launches spot in the zone whose spot has lasted
longest; where the zones' spot is priced apart, it plans a launch in each at its own price and takes the cheapest
plan. The deadline is never risked: a plan that on-demand could not rescue has infinite cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from spotrun.policy.deadline import DeadlineView, deadline_view
from spotrun.policy.markov import (
    JobShape, StepStart, ValueTable, chain_moves, chain_state, option_values, state_belief, value_table,
)
from spotrun.policy.observations import SpotLog, ZoneRuns
from spotrun.policy.placement import Decision, PlacementContext, RunningDecision, place_by_deciding
from spotrun.policy.requests import no_zone, want_nothing, want_on_demand, want_spot
from spotrun.policy.run_ages import RunHazards, current_age, estimate_hazards
from spotrun.policy.zones import longest_lived_zone, priced_out, spot_price_rank, spot_priced_out, spot_zones_to_try

P3_2XLARGE_SPOT_RATIO = 0.9731 / 3.06
OVERHEAD_GRAIN = 60.0  # seconds: restart overheads are planned in whole minutes, rounded up
CHOICE_ORDER = ("idle", "spot", "on-demand")  # tie-break after "keep what is held"


@dataclass(frozen=True)
class DeadlineAwarePolicy:
    name: str = "deadline_aware"
    # the markets it may choose whatever the job's spot.use_spot and spot.fallback say (`markets_conflict`)
    markets_regardless: ClassVar[frozenset[str]] = frozenset({"spot", "on-demand"})
    prior_mean_up: float = 2 * 3600.0  # seconds spot is assumed to last before anything is seen
    prior_mean_down: float = 3600.0  # seconds a gap is assumed to last
    prior_runs: float = 12.0  # weight of that prior, in runs (12: chosen leave-one-trace-out, docs/benchmarks.md)
    # The plan's step: the caller's (the simulator's tick), but never finer than this. The live controller asks
    # every minute; a plan in 1-minute steps has 10x the steps and 10x the columns of work of one in 10-minute steps
    # (a 70 h job's table: 12 s and ~5 GB instead of 0.1 s and ~60 MB, docs/benchmarks.md), and the spot model was
    # chosen on 10-minute traces. Jobs so long that even that table would pass `max_table_bytes` count work in whole
    # steps, then plan in coarser steps (`plan_grid`).
    planning_step: float = 600.0
    max_table_bytes: int = 512 << 20
    # The plan charges itself this share of an on-demand step for each step it idles (nothing is billed): the
    # fitted model takes spot's hazards as known and fixed, so it values waiting through a gap, and giving up
    # on-demand to wait, more than they are worth when the market turns out otherwise, and spends slack early that
    # later spot could have used. 0.05: measured on the 2022 traces (chosen by 6 of 8 folds leaving one trace out)
    # and better on the 2023 and 4-node traces too (docs/benchmarks.md, "Twentieth round").
    idle_charge: float = 0.05

    def place(self, ctx: PlacementContext) -> Decision:
        return place_by_deciding(self, ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        if (refusal := no_zone(ctx)) is not None:
            return refusal
        view = deadline_view(ctx)
        if view is None:
            raise ValueError(f"{self.name} needs the job's deadline and estimated_duration")
        if view.deadline <= view.now:
            return want_on_demand(ctx, "past the deadline: on-demand to finish as soon as possible")
        if spot_priced_out(ctx):
            return want_on_demand(ctx, f"{priced_out(ctx)}: on-demand")
        step, unit = self.plan_grid(ctx, view)
        choice, why, target = self._choose(ctx, view, step, unit)
        if choice == "spot" and (finish := finishes_before_a_move_pays(ctx, view, target)) is not None:
            choice, why = "on-demand", f"on-demand held finishes in {finish / 60:.1f} min, before a move to spot pays"
        if choice == "spot":
            answer = want_spot(ctx, why, pick=lambda ctx, candidates: target or candidates[0])
            if answer is not None:
                return answer
            choice = "on-demand"
        if choice == "on-demand":
            return want_on_demand(ctx, why)
        return want_nothing(ctx, view.step, why)  # asked again at the caller's pace, as the other policies are

    def plan_grid(self, ctx: PlacementContext, view: DeadlineView) -> tuple[float, float]:
        """The step the plan is made in and the unit work is counted in: the caller's step (at least
        `planning_step`) and a unit that divides it and the restart overhead. While the job's table would pass
        `max_table_bytes`, work is counted in whole steps first (a restart's overhead then rounds up to whole steps,
        which keeps the deadline, at a small cost in the plan), and only then is the step doubled."""
        step = max(ctx.step if ctx.step is not None else 0.0, self.planning_step)
        unit = _progress_unit(step, planned_overhead(view))
        while job_shape(ctx, view, step, unit, self.idle_charge).table_bytes > self.max_table_bytes:
            if unit < step:
                unit = step
            elif job_shape(ctx, view, 2 * step, 2 * step, self.idle_charge).steps >= 1:
                step = unit = 2 * step
            else:
                break
        return step, unit

    def _choose(
        self, ctx: PlacementContext, view: DeadlineView, step: float, unit: float,
    ) -> tuple[str, str, str | None]:
        """The choice, why, and the zone spot would be launched in (None: spot is held, or nowhere to be tried), whose
        price the plan weighs."""
        log = ctx.spot_log()
        hazards = estimate_hazards(
            log, ctx.zones, step, self.prior_mean_up / step, self.prior_mean_down / step, self.prior_runs
        )
        held = ctx.current.market if ctx.current is not None else None

        def plan(target: str | None, belief: Belief) -> dict[str, float]:
            shape = job_shape(ctx, view, step, unit, self.idle_charge, target)
            steps_left, start = step_start(ctx, view, shape, step, unit)
            table = value_table(shape, hazards)
            return _option_values(table, hazards, steps_left, start, held, belief, ctx.moves_drain_first)

        plans = [(target, belief, likeliest, plan(target, belief))
                 for target, belief, likeliest in _launch_options(ctx, log, hazards, step)]
        # the launch whose plan is cheapest, and that plan's choice (the first launch on a tie)
        target, belief, likeliest, values = min(plans, key=lambda p: p[3].get("spot", math.inf))
        best = min(values, key=lambda c: (values[c], c != held, CHOICE_ORDER.index(c)))
        if math.isinf(values[best]):
            return "on-demand", "no plan keeps the deadline for sure: on-demand", target
        spot_life, gap = hazards.mean_run(True) * step / 3600, hazards.mean_run(False) * step / 3600
        why = f"least expected cost ({best}; fresh spot lasts ~{spot_life:.1f} h, fresh gaps ~{gap:.1f} h"
        if likeliest is not None:
            why += f"; spot in {likeliest} not known now, there with chance ~{_chance_up(belief, hazards):.0%}"
        return best, why + ")", target


Belief = tuple[tuple[int, float], ...]  # (chain state, chance) pairs


def _launch_options(
    ctx: PlacementContext, log: SpotLog, hazards: RunHazards, step: float,
) -> list[tuple[str | None, Belief, str | None]]:
    """The spot launches to plan for, as (zone, where spot's chain may be there, the zone if its spot is not known
    now). Where the zones that may be tried cost the same: one, in the zone `spot_target` picks, with the belief over
    all zones. Where they are priced apart: each of them with its own belief, planned at its own price, so that a
    cheaper zone's spot is weighed against a likelier one's (a dearer zone known to have spot hid a cheap one not
    known either way, and the plan chose on-demand at the dear zone's price)."""
    candidates = [] if ctx.spot_held_in is not None else spot_zones_to_try(ctx)
    if len({spot_price_rank(ctx, zone) for zone in candidates}) > 1:
        return [(zone, *_launch_belief(ctx, log, hazards, step, zone)) for zone in candidates]
    belief, likeliest = _availability_belief(ctx, log, hazards, step)
    return [(spot_target(ctx, candidates, likeliest), belief, likeliest)]


def _launch_belief(
    ctx: PlacementContext, log: SpotLog, hazards: RunHazards, step: float, zone: str,
) -> tuple[Belief, str | None]:
    """Where spot's chain may be in `zone`: the age of its run where spot is known there now, else moved on from the
    zone's last observation (`_zone_belief`), the zone then named."""
    runs = log.zone(zone)
    if ctx.spot_known_now(zone):
        age = current_age(runs.since, ctx.now, step) if runs.available else 1
        return ((chain_state(hazards, True, age), 1.0),), None
    return _zone_belief(runs, hazards, ctx.now, step), zone


def _availability_belief(
    ctx: PlacementContext, log: SpotLog, hazards: RunHazards, step: float,
) -> tuple[Belief, str | None]:
    """Where spot's chain may be now, as (state, chance) pairs: whether spot is up and the age of its run, in steps.

    Known up somewhere: the oldest run of availability among those zones (the likeliest to last). Known down
    everywhere: the youngest gap (the likeliest to close). Not known now somewhere (the live controller's view: it
    learns spot only from its launches, its instance and preemptions): the chain moved on from the zone's last
    observation for the steps since, or stands in its long-run mix if the zone was never seen; of those zones, the
    one likeliest to have spot now, named. A launch there tells the truth, so trying spot is valued as spot where
    it is up and, where it is not, as what a refusal leaves (`_option_values`).
    """
    zones = [zone for zone in ctx.zones if ctx.spot_within_cap(zone)]  # spot priced out counts as no spot
    known = {zone: ctx.spot_known_now(zone) for zone in zones}
    if True in known.values():
        lives = [
            current_age(log.zone(z).since, ctx.now, step) for z, up in known.items() if up and log.zone(z).available
        ]
        return ((chain_state(hazards, True, max(lives, default=1)), 1.0),), None
    unknown = [zone for zone, up in known.items() if up is None]
    if unknown:
        beliefs = {zone: _zone_belief(log.zone(zone), hazards, ctx.now, step) for zone in unknown}
        likeliest = max(
            unknown, key=lambda zone: (_chance_up(beliefs[zone], hazards), -spot_price_rank(ctx, zone))
        )
        return beliefs[likeliest], likeliest
    gaps = [current_age(log.zone(z).since, ctx.now, step) for z in zones if log.zone(z).available is False]
    return ((chain_state(hazards, False, min(gaps, default=1)), 1.0),), None


def _chance_up(belief: Belief, hazards: RunHazards) -> float:
    is_up, _ = chain_moves(hazards)
    return sum(chance for state, chance in belief if is_up[state])


def spot_target(ctx: PlacementContext, candidates: list[str], likeliest: str | None) -> str | None:
    """Where spot would be launched among `candidates` (`spot_zones_to_try`; none while spot is held): the zone of
    unknown spot the choice weighed, else the longest-lived one; None where spot may be had nowhere."""
    if not candidates:
        return None
    return likeliest if likeliest in candidates else longest_lived_zone(ctx, candidates)


def _zone_belief(runs: ZoneRuns, hazards: RunHazards, now: float, step: float) -> Belief:
    if runs.available is None:
        return state_belief(hazards, None, 0)
    seen = chain_state(hazards, runs.available, current_age(runs.since, runs.last_seen, step))
    return state_belief(hazards, seen, max(round((now - runs.last_seen) / step), 1))


def _option_values(
    table: ValueTable, hazards: RunHazards, steps_left: int, start: StepStart, held: str | None,
    belief: Belief, drains_first: bool = False,
) -> dict[str, float]:
    """`option_values` in a known state; over a belief, each choice's cost averaged, "spot" being a try of spot.
    A refused try leaves the better of idling and on-demand, with the instance held still held unless a move
    gives it up first (`drains_first`: then on-demand is a fresh start)."""
    if len(belief) == 1:
        return option_values(table, hazards, steps_left, start, held, belief[0][0])
    mixed = dict.fromkeys(CHOICE_ORDER, 0.0)
    for state, chance in belief:
        values = option_values(table, hazards, steps_left, start, held, state)
        after = values if not (drains_first and held) else option_values(
            table, hazards, steps_left, start, None, state,
        )
        refused = min(after["idle"], after["on-demand"])
        for choice in CHOICE_ORDER:
            mixed[choice] += chance * values.get(choice, refused)
    return mixed


def finishes_before_a_move_pays(ctx: PlacementContext, view: DeadlineView, target: str | None = None) -> float | None:
    """The seconds the on-demand instance held needs to finish the job, where that is too soon for a move to spot to
    pay even if spot lasted; else None.

    A live move is made before it breaks anything: the instance held trains on, billed, for at least `move_overlap`
    (o) after the new one's launch, and the new one is billed from its launch through its restart overhead d and the
    work the held one leaves it. So a move costs at least min(o, f) on-demand plus max(d + f - o, f) of spot, where
    keeping costs f on-demand (f: the held instance's overhead still owed and the work left; f <= o: the job ends on
    the held instance before the move takes over). A loss of spot only adds to the move, so where keeping costs no
    more than that, keeping is the better choice. The plan's table cannot see it: it bills its steps whole and moves
    in no time, as the simulator does (and tells no overlap)."""
    if ctx.move_overlap is None or ctx.current is None or ctx.current.market != "on-demand":
        return None
    finish, overlap = view.overhead_left + view.work_left, ctx.move_overlap
    if finish <= overlap:
        return finish
    move = overlap + spot_share(ctx, target) * max(view.overhead + finish - overlap, finish)  # in on-demand prices
    return finish if finish <= move else None


def job_shape(
    ctx: PlacementContext, view: DeadlineView, step: float, unit: float, idle_charge: float = 0.0,
    spot_zone: str | None = None,
) -> JobShape:
    """The job as the DP sees it, planned in `step` with work counted in `unit`, each idle step charged
    `idle_charge` of an on-demand step. Asked between two of the plan's steps, the plan may have one step more than
    the deadline holds whole, and the job that much more work (`step_start`): the table has room for both. Costs are
    counted in on-demand prices: only spot's share of it moves a choice, and jobs of any currency or instance size
    with the same share share their tables, to the bit."""
    between_steps = view.step < step - 1e-9
    room = step if between_steps else 0.0
    return JobShape.of(
        step, view.compute + room, view.deadline - view.started + room, planned_overhead(view),
        1.0, spot_share(ctx, spot_zone), unit,
        spot_lost_within_step=between_steps, idle_charge=idle_charge, question=view.step,
        save_every=math.inf if ctx.save_interval is None else ctx.save_interval,
    )


def spot_share(ctx: PlacementContext, zone: str | None = None) -> float:
    """Spot's price as a share of on-demand's: in `zone` (the job's spot price where none is named), from the
    context's prices, else p3.2xlarge's (the issue's default)."""
    spot = ctx.spot_price if zone is None else ctx.spot_price_in(zone)
    if spot is None or not ctx.on_demand_price:
        return P3_2XLARGE_SPOT_RATIO
    return spot / ctx.on_demand_price


def step_start(
    ctx: PlacementContext, view: DeadlineView, shape: JobShape, step: float, unit: float,
) -> tuple[int, StepStart]:
    """The whole steps the plan has from now, and where the job stands for the first (`StepStart`).

    The plan's steps start now. Counting only the whole steps before the deadline would throw away what is left over
    after them, up to a step, and find it again at a later question: asked every minute, the slack the plan saw
    jumped by up to ten minutes from one question to the next, and a move was undone minutes after it was made
    (docs/benchmarks.md, "Asked between the plan's steps"). Instead the plan has one step more, and the job that
    much more work: a plan that finishes the one by the end of its steps, at no more than a step's work a step, has
    finished the other by the deadline. The time left is counted to the caller's last question before the deadline
    (`DeadlineView.time_left`): planned to the deadline itself, a job on the simulator's ticks finished in the tick
    the deadline falls in, late. The instance held counts the restart overhead it still owes as work, and counts as
    past it.
    """
    left = view.time_left  # to the caller's last question before the deadline: it acts only when it asks
    steps_left = max(min(math.ceil(left / step - 1e-9), shape.steps), 1)
    leftover = max(steps_left * step - left, 0.0)
    work_left = view.work_left + leftover
    if ctx.current is None:
        return steps_left, StepStart.nothing_owed(min(work_left / unit, shape.goal), leftover=leftover / unit)
    owed = max(ctx.current.since + planned_overhead(view) - view.now, 0.0)
    kept = min((work_left + owed) / unit, shape.goal)
    return steps_left, StepStart(min(work_left / unit, shape.goal), kept, shape.ages, leftover / unit)


def planned_overhead(view: DeadlineView) -> float:
    """The restart overhead rounded up to whole minutes: a measured one (e.g. 73.4 s) would otherwise leave no
    common unit with the step but a second, and a table 10x the size of one in 2-minute units."""
    return math.ceil(view.overhead / OVERHEAD_GRAIN - 1e-9) * OVERHEAD_GRAIN


def _progress_unit(step: float, overhead: float) -> float:
    """Progress is counted in units that both the step and the restart overhead are whole multiples of."""
    whole_step, whole_overhead = round(step), round(overhead)
    if abs(step - whole_step) > 1e-6 or abs(overhead - whole_overhead) > 1e-6 or whole_step <= 0:
        return step / 60
    return float(math.gcd(whole_step, whole_overhead)) if whole_overhead else float(whole_step)

