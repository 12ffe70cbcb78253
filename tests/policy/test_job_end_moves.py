"""A move from on-demand to spot near the job's end: live, it is made before it breaks anything (the instance held
trains on, billed, until the new one is up) and billed by the second, so one that cannot pay even if spot lasted is
not made (`deadline_aware.finishes_before_a_move_pays`). The plan's table cannot see it: it bills its steps whole and
moves in no time, as the simulator does."""

from __future__ import annotations

import dataclasses

import pytest

from spotrun.policy import DeadlineAwarePolicy, Keep, Launch, Placement, PlacementContext
from spotrun.policy.deadline import deadline_view
from spotrun.policy.deadline_aware import finishes_before_a_move_pays

HOUR = 3600.0
OVERHEAD = 360.0
ON_DEMAND, SPOT = 3.06, 0.9731


def on_demand_with_spot_up(work_left: float, overlap: float | None, *, now: float = 10 * HOUR - 25 * 60.0):
    """A 9 h job due at 10 h, on on-demand since 1 h, asked every minute with spot known to be there."""
    return PlacementContext(
        job_id=1, now=now, zones=("z",), use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, deadline=10 * HOUR, estimated_duration=9 * HOUR,
        current=Placement("z", "on-demand", HOUR), progress=9 * HOUR - work_left, step=60.0,
        restart_overhead=OVERHEAD, on_demand_price=ON_DEMAND, spot_price=SPOT, spot_now={"z": True},
        move_overlap=overlap,
    )


@pytest.mark.parametrize("work_minutes", [1, 2, 3])
def test_a_move_to_spot_that_cannot_pay_before_the_job_ends_is_not_made(work_minutes):
    # the plan alone moves: a 10-minute step of spot would finish the 6-minute restart and the work, billed as one
    # step of spot against one of on-demand; live the move pays the overhead at spot's price, and the instance
    # held trains on (and is billed) until the new one is up
    simulated = DeadlineAwarePolicy().decide(on_demand_with_spot_up(work_minutes * 60.0, None))
    assert isinstance(simulated, Launch) and simulated.market == "spot"
    live = DeadlineAwarePolicy().decide(on_demand_with_spot_up(work_minutes * 60.0, 60.0))
    assert isinstance(live, Keep) and "before a move to spot pays" in live.reason


def test_a_move_with_much_work_left_is_made_live_as_the_plan_says():
    early = on_demand_with_spot_up(4 * HOUR, 120.0, now=2 * HOUR)
    decision = DeadlineAwarePolicy().decide(early)
    assert isinstance(decision, Launch) and decision.market == "spot"
    assert decision == DeadlineAwarePolicy().decide(dataclasses.replace(early, move_overlap=None))


@pytest.mark.parametrize("overlap", [0.0, 60.0, 120.0])
def test_keeping_is_chosen_exactly_while_it_costs_no_more_than_a_move_whose_spot_lasts(overlap):
    # keeping costs f on-demand; the move at least o on-demand and d + f - o of spot: equal where
    # (f - o) (p_od - p_spot) = p_spot d
    even = overlap + SPOT * OVERHEAD / (ON_DEMAND - SPOT)
    for finish, keeps in ((even - 1.0, True), (even + 1.0, False), (overlap, True), (overlap / 2, True)):
        view = deadline_view(on_demand_with_spot_up(finish, overlap))
        assert (finishes_before_a_move_pays(on_demand_with_spot_up(finish, overlap), view) is not None) == keeps


def test_only_a_move_off_on_demand_is_held_back_and_only_where_moves_overlap():
    ctx = on_demand_with_spot_up(60.0, 60.0)
    assert finishes_before_a_move_pays(ctx, deadline_view(ctx)) == pytest.approx(60.0)
    for other in (dataclasses.replace(ctx, move_overlap=None), dataclasses.replace(ctx, current=None),
                  dataclasses.replace(ctx, current=Placement("z", "spot", HOUR))):
        assert finishes_before_a_move_pays(other, deadline_view(other)) is None


def test_the_restart_overhead_still_owed_counts_in_the_time_to_finish():
    # on on-demand for 2 minutes of its 6-minute restart: 4 minutes owed and 1 of work, past the break-even
    held = Placement("z", "on-demand", 10 * HOUR - 27 * 60.0)
    ctx = dataclasses.replace(on_demand_with_spot_up(60.0, 60.0), current=held)
    assert finishes_before_a_move_pays(ctx, deadline_view(ctx)) is None
