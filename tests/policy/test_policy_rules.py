"""Each policy's rules on hand-made situations (one zone, 600 s steps, d = 360 s unless said)."""

from dataclasses import replace

import pytest

from spotrun.policy import (
    DeadlineAwarePolicy, DefaultPolicy, GiveUp, GreedyPolicy, Keep, Launch, OnDemandPolicy, PastAttempt, Placement,
    PlacementContext, SpotLog, UniformProgressPolicy, Wait, get_policy, policy_names,
)

HOUR = 3600.0
STEP = 600.0


def ctx(now=0.0, progress=0.0, spot=True, current=None, compute=10 * HOUR, deadline=20 * HOUR, overhead=360.0, **over):
    base = dict(
        job_id=1, now=now, zones=("z",), use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, deadline=deadline, estimated_duration=compute,
        current=current, progress=progress, restart_overhead=overhead, step=STEP,
        spot_now={} if spot is None else {"z": spot},
    )
    base.update(over)
    return PlacementContext(**base)


def on(market, since=0.0):
    return Placement("z", market, since)


# ---- uniform progress -------------------------------------------------------------------------------------------


def test_up_goes_on_demand_exactly_when_idle_and_behind_the_line():
    # line at t = 5 h: C·t/D = 2.5 h of progress
    up = UniformProgressPolicy()
    behind = up.decide(ctx(now=5 * HOUR, progress=2.5 * HOUR - 1, spot=False))
    on_line = up.decide(ctx(now=5 * HOUR, progress=2.5 * HOUR, spot=False))
    assert isinstance(behind, Launch) and behind.market == "on-demand"
    assert isinstance(on_line, Wait)


def test_up_takes_spot_whenever_available_even_when_behind():
    decision = UniformProgressPolicy().decide(ctx(now=5 * HOUR, progress=0.0, spot=True))
    assert isinstance(decision, Launch) and decision.market == "spot"


def test_up_hysteresis_keeps_on_demand_until_ahead_of_the_line_2d_from_now():
    up = UniformProgressPolicy()
    now = 5 * HOUR
    line_in_2d = (now + 2 * 360) * 10 / 20  # progress the line asks 2d from now
    stays = up.decide(ctx(now=now, progress=line_in_2d - 1, spot=True, current=on("on-demand", 0.0)))
    leaves = up.decide(ctx(now=now, progress=line_in_2d, spot=True, current=on("on-demand", 0.0)))
    assert isinstance(stays, Keep)
    assert isinstance(leaves, Launch) and leaves.market == "spot"
    assert isinstance(up.decide(ctx(now=now, progress=line_in_2d + HOUR, spot=False, current=on("on-demand"))), Keep)


def test_up_safety_net_fires_when_slack_falls_under_2d():
    # 10 h of work left, 10 h 20 min of time left: work + 2d = 10.2 h -> 62 steps >= 62 steps left
    decision = UniformProgressPolicy().decide(ctx(now=9 * HOUR + 40 * 60, progress=0.0, spot=True,
                                                  compute=10 * HOUR, deadline=20 * HOUR))
    assert isinstance(decision, Launch) and decision.market == "on-demand"
    roomier = UniformProgressPolicy().decide(ctx(now=9 * HOUR, progress=0.0, spot=True))
    assert roomier.market == "spot"


def test_up_keeps_a_warm_spot_instance_when_the_deadline_is_near_but_not_a_fresh_one():
    # d = 720 s: an instance started one step ago still owes 120 s of overhead
    near = dict(now=9 * HOUR + 40 * 60, progress=0.0, spot=True, overhead=720.0)
    warm = UniformProgressPolicy().decide(ctx(current=on("spot", 9 * HOUR), **near))
    fresh = UniformProgressPolicy().decide(ctx(current=on("spot", 9 * HOUR + 30 * 60), **near))
    assert isinstance(warm, Keep)
    assert isinstance(fresh, Launch) and fresh.market == "on-demand"


# ---- greedy and on-demand ---------------------------------------------------------------------------------------


def test_greedy_waits_without_spot_until_the_deadline_forces_on_demand():
    greedy = GreedyPolicy()
    assert isinstance(greedy.decide(ctx(now=5 * HOUR, progress=0.0, spot=False)), Wait)
    # 10 h + d left to do in 10 h 10 min: 61 steps needed >= 61 left
    forced = greedy.decide(ctx(now=9 * HOUR + 50 * 60, progress=0.0, spot=True))
    assert isinstance(forced, Launch) and forced.market == "on-demand"
    assert isinstance(greedy.decide(ctx(now=9 * HOUR + 50 * 60, progress=0.0, spot=True, current=on("on-demand"))), Keep)


def test_on_demand_policy_always_on_demand():
    assert OnDemandPolicy().decide(ctx(spot=True)).market == "on-demand"
    assert isinstance(OnDemandPolicy().decide(ctx(current=on("on-demand"))), Keep)
    assert isinstance(OnDemandPolicy().decide(ctx(zones=())), GiveUp)


# ---- the deadline-aware default ---------------------------------------------------------------------------------


def test_deadline_aware_waits_with_slack_takes_spot_and_goes_on_demand_when_tight():
    policy = DeadlineAwarePolicy()
    assert isinstance(policy.decide(ctx(now=HOUR, spot=False)), Wait)
    assert policy.decide(ctx(now=HOUR, spot=True)).market == "spot"
    tight = policy.decide(ctx(now=9 * HOUR + 50 * 60, spot=True))
    assert isinstance(tight, Launch) and tight.market == "on-demand"


def test_deadline_aware_waits_only_until_its_caller_asks_again():
    """It plans in ten-minute steps, but a wait lasts only until the caller's next question (the controller asks
    every minute): spot back after two minutes is taken then, not eight minutes later."""
    for every in (60.0, STEP):
        waited = DeadlineAwarePolicy().decide(ctx(now=HOUR, spot=False, step=every))
        assert isinstance(waited, Wait) and waited.until == HOUR + every


def test_deadline_aware_stops_taking_spot_that_keeps_dying_young():
    cycles = 30
    now = 2 * cycles * STEP
    hurried = ctx(now=now, progress=now * 0.8, spot=True, compute=20 * HOUR, deadline=24 * HOUR,
                  current=on("on-demand", now - 3 * STEP))
    leave = DeadlineAwarePolicy().decide(hurried)  # nothing seen yet: spot is assumed to last
    assert isinstance(leave, Launch) and leave.market == "spot"
    flaky = SpotLog()
    for i in range(cycles):  # spot lives one step and is gone the next, over and over
        flaky.record("z", i * 2 * STEP, True)
        flaky.record("z", (i * 2 + 1) * STEP, False)
    flaky.record("z", now, True)
    assert isinstance(DeadlineAwarePolicy().decide(replace(hurried, spot=flaky)), Keep)  # stays on on-demand


def test_deadline_aware_never_answers_keep_without_an_instance_and_place_delegates():
    decision = DeadlineAwarePolicy().place(ctx(now=HOUR, spot=None))
    assert isinstance(decision, Launch) and decision.market == "spot"  # unknown capacity: try spot


def test_default_policy_with_a_deadline_is_the_deadline_aware_policy():
    c = ctx(now=HOUR, spot=False)
    assert DefaultPolicy().decide(c) == DeadlineAwarePolicy().decide(c)
    no_deadline = ctx(deadline=None, current=on("spot"))
    assert isinstance(DefaultPolicy().decide(no_deadline), Keep)
    # with fallback "wait" the user refused on-demand: the deadline machinery stays off
    waits = ctx(now=HOUR, spot=False, fallback="wait")
    assert DefaultPolicy().place(waits).market == "spot"


def test_spot_log_from_controller_history_counts_lifetimes_and_gaps():
    history = (
        PastAttempt("z", "spot", 0.0, 10.0, 110.0, "preempted"),
        PastAttempt("z", "spot", 120.0, None, 120.0, "no_capacity"),
        PastAttempt("z", "spot", 300.0, 300.0, 400.0, "preempted"),
        PastAttempt("y", "on-demand", 400.0, 400.0, None, None),
    )
    runs = SpotLog.from_history(history).zone("z")
    assert runs.lifetimes == [100.0, 100.0]
    assert runs.gaps == [190.0]
    assert runs.available is False


def test_a_spot_instance_still_running_tells_that_spot_is_there_now():
    history = (
        PastAttempt("z", "spot", 0.0, 10.0, 110.0, "preempted"),
        PastAttempt("z", "spot", 200.0, 210.0, None, None),  # still running
        PastAttempt("y", "spot", 300.0, None, None, None),  # still launching: tells nothing yet
    )
    runs = SpotLog.from_history(history, now=1_000.0).zone("z")
    assert (runs.available, runs.since, runs.last_seen) == (True, 210.0, 1_000.0)
    assert runs.lifetimes == [100.0] and runs.gaps == [100.0]  # the run going on is not a completed one
    assert SpotLog.from_history(history).zone("z").last_seen == 210.0  # without `now`: only what was recorded
    assert SpotLog.from_history(history, now=1_000.0).zone("y").available is None
    live = ctx(now=1_000.0, spot=None, step=None, history=history)
    assert live.spot_known_now("z") is True


def test_registry_names_and_clear_errors():
    assert {"default", "greedy", "uniform_progress", "on_demand", "deadline_aware"} <= set(policy_names())
    with pytest.raises(ValueError, match="unknown placement policy 'nope'"):
        get_policy("nope")
    with pytest.raises(ValueError, match="bad options"):
        get_policy("greedy", colour=1)
    with pytest.raises(ValueError, match="deadline"):
        UniformProgressPolicy().decide(ctx(deadline=None))


def test_a_fresh_no_capacity_answer_from_the_controller_counts_as_known_now():
    tried = (PastAttempt("z", "spot", HOUR - 5, None, HOUR - 5, "no_capacity"),)
    live = ctx(now=HOUR, spot=None, step=None, history=tried)  # the controller's view: no spot_now, no log
    assert live.spot_known_now("z") is False
    assert isinstance(DeadlineAwarePolicy().decide(live), Wait)  # plenty of slack: wait rather than pay on-demand
    stale = ctx(now=2 * HOUR, spot=None, step=None, history=tried)
    assert stale.spot_known_now("z") is None


@pytest.mark.parametrize(("every", "lasts"), [(None, 240.0), (60.0, 240.0), (600.0, 300.0), (3600.0, 1800.0)])
def test_a_refusal_stays_news_for_half_a_question_and_at_least_four_minutes(every, lasts):
    """Asked every minute, a policy that wants spot would otherwise try it again every minute where it was just
    refused; asked less often, the answer stays news until a moment before the next question."""
    tried = (PastAttempt("z", "spot", HOUR, None, HOUR, "no_capacity"),)
    assert ctx(now=HOUR + lasts, spot=None, step=every, history=tried).spot_known_now("z") is False
    assert ctx(now=HOUR + lasts + 1, spot=None, step=every, history=tried).spot_known_now("z") is None
