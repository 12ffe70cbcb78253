"""The deadline-aware plan is made in ten-minute steps, but the controller asks it every minute: whatever minute it is
asked at, the plan must see the job's true slack, no time thrown away, and keep the deadline
(`deadline_aware.step_start`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from spotrun.policy import DeadlineAwarePolicy, Keep, Placement, PlacementContext
from spotrun.policy.deadline import deadline_view
from spotrun.policy.deadline_aware import job_shape, step_start
from spotrun.policy.markov import JobShape, StepStart, chain_state, option_values, value_table
from spotrun.policy.run_ages import BASE_GRID, RunHazards, bucket_hazards
from spotrun.sim.engine import SimJob, run_job

HOUR = 3600.0
STEP = 600.0
UNIT = 120.0  # the plan's progress unit for a 6-minute restart overhead: gcd(600, 360)
OVERHEAD = 360.0


def asked(now: float, progress: float, held: Placement | None, *, deadline: float = 10 * HOUR,
          step: float = 60.0) -> PlacementContext:
    """A 9 h job submitted at 0, due at `deadline`, with `progress` seconds done, asked at `now` every `step`."""
    return PlacementContext(
        job_id=1, now=now, zones=("z",), use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, deadline=deadline, estimated_duration=9 * HOUR,
        current=held, progress=progress, step=step, restart_overhead=OVERHEAD,
    )


def start_of(ctx: PlacementContext) -> tuple[int, StepStart, tuple[int, ...]]:
    view = deadline_view(ctx)
    shape = job_shape(ctx, view, STEP, UNIT)
    steps_left, start = step_start(ctx, view, shape, STEP, UNIT)
    return steps_left, start, shape.works


def test_on_the_grid_every_choice_starts_from_the_work_left():
    # the simulator on ten-minute traces, asked at the plan's own step: the work left, as before
    ctx = asked(2 * HOUR, HOUR, Placement("z", "on-demand", HOUR), step=STEP)
    steps_left, start, _ = start_of(ctx)
    assert steps_left == 8 * 6
    assert start == StepStart.nothing_owed(8 * HOUR / UNIT, age=1)  # ages count up to the overhead: one step


@pytest.mark.parametrize("minute", range(10))
def test_the_plan_sees_the_true_slack_at_every_minute_of_a_step(minute):
    # on on-demand since 1 h, working since: asked `minute` minutes after 2 h; the plan's steps start now, and the
    # part of a step left over before the deadline is carried as work
    now = 2 * HOUR + minute * 60.0
    work_left = 8 * HOUR - minute * 60.0
    steps_left, start, _ = start_of(asked(now, 9 * HOUR - work_left, Placement("z", "on-demand", HOUR)))
    assert steps_left == 8 * 6
    assert steps_left * STEP - start.work_left * UNIT == pytest.approx(10 * HOUR - now - work_left)  # the slack
    assert start.kept == start.work_left and start.kept_age == 1
    assert start.leftover * UNIT == pytest.approx(minute * 60.0)


@pytest.mark.parametrize("minute", [1, 3, 5])
def test_an_instance_held_counts_the_restart_overhead_it_still_has_to_pay(minute):
    # on spot since two minutes ago: 4 minutes of its 6-minute restart to go, which a step of it does not make
    now = 2 * HOUR + minute * 60.0
    _, start, works = start_of(asked(now, HOUR, Placement("z", "spot", now - 120.0)))
    assert start.kept - start.work_left == pytest.approx(240.0 / UNIT)
    assert works[start.kept_age] * UNIT == STEP  # and from then on, it works the whole step


def test_no_time_is_thrown_away_between_the_plans_steps():
    # on on-demand with 51 min 40 s of work left and 59 min to the deadline: it finishes with 7 minutes to spare,
    # but counting only the 5 whole steps left (50 min) it could not, and said so
    now = 10 * HOUR - 59 * 60.0
    ctx = asked(now, 9 * HOUR - 3100.0, Placement("z", "on-demand", HOUR))
    decision = DeadlineAwarePolicy().decide(ctx)
    assert isinstance(decision, Keep) and "least expected cost" in decision.reason
    too_much = dataclasses.replace(ctx, progress=9 * HOUR - 3600.0)  # an hour of work in 59 minutes
    assert "no plan keeps the deadline" in DeadlineAwarePolicy().decide(too_much).reason


def test_time_left_counts_to_the_callers_last_question_before_the_deadline():
    # 2 h of work left, due 30 s after a minute's question: what the caller does after it comes after the deadline
    steps_left, start, _ = start_of(asked(HOUR, 7 * HOUR, None, deadline=5 * HOUR + 30.0))
    assert steps_left * STEP - start.work_left * UNIT == pytest.approx(4 * HOUR - 2 * HOUR)
    # due 8 minutes into a ten-minute tick of the simulator: whole ticks, as counted before
    steps_left, start, _ = start_of(asked(HOUR, 7 * HOUR, None, deadline=3.3 * HOUR, step=STEP))
    assert (steps_left, start.work_left) == (13, pytest.approx(2 * HOUR / UNIT))


@pytest.mark.parametrize("tick", [60.0, 300.0, STEP])
def test_deadline_kept_when_it_falls_between_two_questions(tick):
    # spot that lures the job on and goes for good, or blinks every other tick, and a deadline that falls within a
    # tick: counted to the deadline instead of to the last question before it, the plan finished in the tick that
    # straddles it (on ten-minute ticks 5 of these 24 runs missed)
    steps = round(12 * HOUR / tick)
    markets = {"blinking": np.arange(steps) % 2 == 0}
    for hours in (1, 2, 3, 4, 5):
        markets[f"lure {hours} h"] = np.arange(steps) < round(hours * HOUR / tick)
    missed = []
    for name, available in markets.items():
        for share in (0.1, 0.4, 0.7, 0.9):
            job = SimJob(compute_seconds=6 * HOUR, deadline_seconds=7 * HOUR + share * tick, restart_overhead=OVERHEAD)
            result = run_job(DeadlineAwarePolicy(), ("z",), available[None, :], tick, job)
            if not result.met_deadline:
                missed.append((name, share, result.finished_at))
    assert missed == []


def test_work_between_two_columns_of_the_table_is_valued_between_them():
    hazards = RunHazards(up=bucket_hazards(BASE_GRID[-1]), down=bucket_hazards(BASE_GRID[3]))
    table = value_table(JobShape(steps=12, goal=50, works=(2, 5), on_demand_cost=1.0, spot_cost=0.32), hazards)
    up = chain_state(hazards, True, 1)

    def values(work_left: float) -> dict[str, float]:
        return option_values(table, hazards, 10, StepStart.nothing_owed(work_left), "on-demand", up)

    low, high, between = values(41), values(42), values(41.25)
    assert low["on-demand"] < high["on-demand"]  # rounded up, 41.25 units would cost what 42 do
    for choice in ("idle", "on-demand", "spot"):
        assert between[choice] == pytest.approx(0.75 * low[choice] + 0.25 * high[choice])
    # where the column with more work is a sure miss, so is the work between: the deadline is kept
    assert values(42)["idle"] < float("inf") and values(42.5)["idle"] == values(43)["idle"] == float("inf")


@pytest.mark.parametrize("minutes_left, on_spot_for, work_minutes, keeps", [(17, 3, 2, True), (15, 5, 2, True),
                                                                       (12, 3, 4, False)])
def test_spot_that_finishes_the_job_within_a_step_is_kept_while_a_loss_before_the_end_could_be_made_up(
    minutes_left, on_spot_for, work_minutes, keeps,
):
    # 17 minutes before the deadline, on spot for 3 minutes (3 of its 6-minute restart to go) with 2 minutes of work
    # left, it finishes 12 minutes before; lost just before that, on-demand from the next minute (6 + 2 minutes)
    # still makes it. The plan took the step's work as lost at the step's end and the next step as too short, and
    # moved the job to on-demand, which it then paid for twice; two minutes on, it also counted the time left over
    # after the whole steps, carried as work, as work spot had to do before the job ended. With 4 minutes of work
    # left 12 minutes before the deadline, a loss at the finish leaves 5 minutes, not the 10 on-demand needs.
    now = 10 * HOUR - minutes_left * 60.0
    ctx = asked(now, 9 * HOUR - work_minutes * 60.0, Placement("z", "spot", now - on_spot_for * 60.0))
    decision = DeadlineAwarePolicy().decide(ctx)
    assert isinstance(decision, Keep) == keeps, decision
    if not keeps:
        assert decision.market == "on-demand"


@pytest.mark.parametrize("save_interval, keeps", [(None, False), (60.0, True), (300.0, True), (600.0, False)])
def test_spot_is_kept_while_the_work_a_loss_undoes_could_be_made_up(save_interval, keeps):
    # on spot for an hour, 46 minutes of work left and 60 to the deadline: 14 minutes of slack. Counting a whole
    # 10-minute step of work lost at a loss and on-demand only from the next step (6 minutes to restart) needs 16.
    # A trainer seen to save every minute (or every 5) loses at most that, and the loss is seen within a minute:
    # 1 + 1 + 6 minutes of the 14 (5 + 1 + 6). Unknown, or every 10 minutes: as much as a step.
    now = 10 * HOUR - 3600.0
    ctx = dataclasses.replace(
        asked(now, 9 * HOUR - 46 * 60.0, Placement("z", "spot", HOUR)), save_interval=save_interval,
    )
    decision = DeadlineAwarePolicy().decide(ctx)
    assert isinstance(decision, Keep) == keeps, decision
    if not keeps:
        assert decision.market == "on-demand"


def test_a_measured_save_interval_rounds_up_to_the_questions_and_stops_at_a_step():
    # a save interval measured a second longer makes no new table; beyond a step it undoes no more than unknown
    def shape_for(save_interval):
        ctx = dataclasses.replace(asked(2 * HOUR, HOUR, None), save_interval=save_interval)
        return job_shape(ctx, deadline_view(ctx), STEP, UNIT)

    assert shape_for(61.0) == shape_for(120.0) != shape_for(60.0)
    assert shape_for(None) == shape_for(3600.0) == shape_for(600.0) != shape_for(540.0)
    assert shape_for(60.0).save_every == pytest.approx(0.5) and shape_for(0.0).save_every == 0.0


def test_spot_the_next_step_would_refuse_is_not_counted_on_between_two_columns():
    # a 2-hour job due in 2.5 h, on on-demand since 21 minutes (restart still owed), asked at 23 with 106 minutes of
    # work left; its trainer has gone 11 minutes between two saves (more than a step: a loss undoes a step's work).
    # After a step of spot its work left falls between two columns of the table: with the fewer, holding spot is
    # still safe; with the more, and with the work the job will have, it is not. Read between the two, the plan
    # counted on holding spot half the time, moved to it, and six minutes later had to move back to on-demand
    ctx = PlacementContext(
        job_id=1, now=23 * 60.0, zones=("z",), use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, deadline=2.5 * HOUR, estimated_duration=2 * HOUR,
        current=Placement("z", "on-demand", 21 * 60.0), progress=14 * 60.0, step=60.0, restart_overhead=OVERHEAD,
        save_interval=660.0,
    )
    decision = DeadlineAwarePolicy().decide(ctx)
    assert isinstance(decision, Keep), decision
