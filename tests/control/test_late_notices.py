"""A preemption notice that reaches the agent API after its attempt ended (its agent's last reports may arrive in the
grace after the end) changes nothing the attempt records: it is an event. Taken as the attempt's notice, it set the
notice after the end, and the recovery time measured from it (/metrics) was shorter than it was, its sum falling."""

from __future__ import annotations

import pytest

from spotrun.server import fleet_totals
from spotrun.state import Attempt, Event

BOUNDS = (5.0, 30.0, 120.0)


def recoveries(world) -> fleet_totals.Recoveries:
    with world.store.session() as session:
        return fleet_totals.recoveries(session, BOUNDS)


def preempted_then_replaced(world, sigterm_first: bool) -> tuple[int, str]:
    """A job whose spot instance the cloud took (after the agent's own SIGTERM notice, with `sigterm_first`), and
    whose replacement's agent started: one recovery."""
    job_id = world.submit()
    first = world.run_to_running(job_id)
    world.clock.advance(100)
    if sigterm_first:
        world.agent(first)("notice", {"source": "sigterm"})
    world.cloud.reclaim(first)
    world.tick()
    assert world.attempts(job_id)[0].end_reason == "preempted"
    for _ in range(30):
        world.tick(5)
        replacement = world.attempts(job_id)[-1]
        if replacement.instance_id and replacement.instance_id != first and replacement.ended_at is None:
            world.agent(replacement.instance_id)("started", {"address": "127.0.0.1"})
            break
    else:
        pytest.fail("no replacement was launched")
    return job_id, first


@pytest.mark.parametrize("sigterm_first", [False, True], ids=["no-notice-before", "sigterm-before"])
def test_a_notice_after_the_attempt_ended_is_an_event_and_changes_no_recovery(world, sigterm_first):
    job_id, first = preempted_then_replaced(world, sigterm_first)
    before = world.attempts(job_id)[0]
    recovered = recoveries(world)
    assert recovered.count == 1

    world.clock.advance(60)  # within the grace in which an ended attempt's agent is still heard
    world.agent(first)("notice", {"source": "local-metadata", "deadline": world.clock.now() + 30})

    assert recoveries(world) == recovered
    after = world.attempts(job_id)[0]
    assert (after.notice_at, after.notice_source, after.reclaim_at) == (
        before.notice_at, before.notice_source, before.reclaim_at)
    assert after.notice_at is None or after.notice_at <= after.ended_at
    with world.store.session() as session:
        late = session.query(Event).filter_by(attempt_id=after.id, kind="late_preemption_notice").all()
        assert len(late) == 1 and "after the attempt ended" in late[0].message


def test_a_late_notice_delivered_twice_is_one_event(world):
    job_id, first = preempted_then_replaced(world, sigterm_first=False)
    for _ in range(2):
        world.agent(first)("notice", {"source": "local-metadata"})
    with world.store.session() as session:
        attempt_id = session.query(Attempt.id).filter_by(job_id=job_id, number=1).scalar()
        assert session.query(Event).filter_by(attempt_id=attempt_id, kind="late_preemption_notice").count() == 1
