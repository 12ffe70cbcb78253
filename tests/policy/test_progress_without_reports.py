"""What a deadline policy takes as done and as left when the trainer reports no progress, or when the estimate runs
out before the job ends."""

import pytest

from spotrun.policy import (
    DeadlineAwarePolicy, GreedyPolicy, Keep, Launch, PastAttempt, Placement, PlacementContext, UniformProgressPolicy,
    Wait,
)
from spotrun.policy.deadline import deadline_view, progress_from_history, time_covered

HOUR = 3600.0
STEP = 600.0
D = 360.0  # restart overhead


def ctx(now, history=(), current=None, nodes=1, progress=None, compute=10 * HOUR, deadline=20 * HOUR, spot=True):
    return PlacementContext(
        job_id=1, now=now, zones=("z",), use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, deadline=deadline, estimated_duration=compute,
        history=tuple(history), current=current, progress=progress, restart_overhead=D, step=STEP, nodes=nodes,
        spot_now={"z": spot},
    )


def ran(start, end=None, market="spot", reason=None):
    """A try that got an instance at `start`; open when `end` is None."""
    return PastAttempt("z", market, start, start, end, reason if end is not None else None)


def test_time_covered_counts_overlaps_once_and_only_where_enough_spans_meet():
    spans = [(0.0, 10.0), (5.0, 20.0), (30.0, 40.0), (8.0, 6.0)]  # the last is empty
    assert time_covered(spans) == 30.0
    assert time_covered(spans, at_least=2) == 5.0
    assert time_covered(spans, at_least=3) == 0.0
    assert time_covered([]) == 0.0


def test_the_instance_held_counts_once_when_the_history_holds_its_try():
    # the controller's view: the running try is in the history and is also the current placement
    now = 2 * HOUR
    live = ctx(now, history=[ran(0.0)], current=Placement("z", "spot", 0.0))
    assert progress_from_history(live, D) == pytest.approx(now - D)
    # the simulator's view: the history holds ended tries only, the instance held counts on its own
    sim = ctx(now, history=[ran(0.0, HOUR, reason="preempted")], current=Placement("z", "on-demand", 1.5 * HOUR))
    assert progress_from_history(sim, D) == pytest.approx((HOUR - D) + (0.5 * HOUR - D))


def test_a_move_that_starts_the_new_instance_first_is_not_counted_twice():
    # make-before-break: the on-demand instance runs until the spot one has booted
    history = [ran(0.0, HOUR + 600, market="on-demand", reason="migrated"), ran(HOUR)]
    assert progress_from_history(ctx(2 * HOUR, history, current=Placement("z", "spot", HOUR)), D) == pytest.approx(
        2 * HOUR - D
    )


def test_a_try_counts_until_its_work_is_known_to_have_gone_on_not_until_its_end_was_noticed():
    # preempted without a word at 2 h 50 min (its last heartbeat); the controller noticed at 3 h
    noticed_late = PastAttempt("z", "spot", 0.0, 0.0, 3 * HOUR, "preempted", worked_until=2 * HOUR + 3000)
    assert progress_from_history(ctx(4 * HOUR, [noticed_late]), D) == pytest.approx(2 * HOUR + 3000 - D)
    assert progress_from_history(ctx(4 * HOUR, [noticed_late._replace(worked_until=None)]), D) == pytest.approx(
        3 * HOUR - D
    )


def test_a_gang_progresses_only_while_all_its_nodes_run():
    # three nodes from t = 0; node 2 lost at 1 h, replaced at 1.5 h: no progress from 1 h until its overhead is over
    history = [ran(0.0), ran(0.0), ran(0.0, HOUR, reason="preempted"), ran(1.5 * HOUR)]
    gang = ctx(3 * HOUR, history, current=Placement("z", "spot", 1.5 * HOUR), nodes=3)
    assert progress_from_history(gang, D) == pytest.approx((HOUR - D) + (1.5 * HOUR - D))
    # summed per try (as it was) it counted each node: more than the wall time itself
    assert progress_from_history(gang, D) < 3 * HOUR


def test_work_left_once_the_estimate_is_used_up_is_the_overrun_again_and_a_step():
    assert deadline_view(ctx(5 * HOUR, progress=10 * HOUR)).work_left == STEP  # reported its last step, not ended
    overrun = deadline_view(ctx(13 * HOUR, history=[ran(0.0, 12 * HOUR + D, reason="preempted")]))
    assert overrun.done == pytest.approx(12 * HOUR)
    assert overrun.work_left == pytest.approx(2 * HOUR + STEP)
    assert deadline_view(ctx(5 * HOUR, progress=4 * HOUR)).work_left == pytest.approx(6 * HOUR)


POLICIES = [DeadlineAwarePolicy(), UniformProgressPolicy(), GreedyPolicy()]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_a_job_past_its_estimate_without_an_instance_is_placed_again(policy):
    # its estimate (10 h) is used up but the job has not ended: spot where there is some, and on-demand once the
    # step and the restart it is taken to need fill the time left (it used to wait for good: "work done")
    spot = policy.decide(ctx(12 * HOUR, progress=10 * HOUR, spot=True))
    assert isinstance(spot, Launch) and spot.market == "spot", spot
    late = policy.decide(ctx(20 * HOUR - 2 * STEP, progress=10 * HOUR, spot=False))
    assert isinstance(late, Launch) and late.market == "on-demand", late


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_a_running_job_past_its_estimate_keeps_its_instance(policy):
    held = Placement("z", "spot", 9 * HOUR)
    decision = policy.decide(ctx(12 * HOUR, progress=10 * HOUR, current=held, spot=True))
    assert isinstance(decision, Keep), decision


def test_uniform_progress_does_not_stop_a_job_at_half_its_estimate():
    # the controller's view of a job on spot without progress reports, half way: it had counted the try twice
    # (work done), and stopped the instance to wait
    now = 5 * HOUR + D
    decision = UniformProgressPolicy().decide(ctx(now, history=[ran(0.0)], current=Placement("z", "spot", 0.0)))
    assert isinstance(decision, Keep), decision
    assert not isinstance(decision, Wait)


def test_uniform_progress_counts_a_gang_behind_its_line_as_behind():
    # four nodes ran 4 h together and were taken back: 4 h less one overhead done, behind the line at 8 h (4 h);
    # summed per node it read as 14.5 h done, ahead, and waited for spot
    history = [ran(0.0, 4 * HOUR, reason="preempted") for _ in range(4)]
    decision = UniformProgressPolicy().decide(ctx(8 * HOUR, history, nodes=4, spot=False))
    assert isinstance(decision, Launch) and decision.market == "on-demand", decision
