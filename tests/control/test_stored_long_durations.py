"""A job stored before durations were capped at 10 years (its spec kept as stored, in seconds) is still driven: the
cap is for new specs. A stored spec the controller could no longer read left its job stuck (every tick failed on
it), not even cancellable, its instance running and billed."""

from __future__ import annotations

import pytest

from spotrun.control import jobs
from spotrun.spec import JobSpec, SpecError, parse_spec
from spotrun.state import Job

HUNDRED_YEARS = 36500 * 86400.0  # "max_wait: 36500d", accepted before the cap


def store_as_before(world, job_id: int, **spot) -> None:
    with world.store.session() as session:
        job = session.get(Job, job_id)
        job.spec = {**job.spec, "spot": {**job.spec["spot"], **spot}}


def test_a_running_job_stored_with_a_long_max_wait_can_still_be_cancelled(world):
    job_id = world.submit()
    world.run_to_running(job_id)
    store_as_before(world, job_id, max_wait=HUNDRED_YEARS)
    jobs.request_cancel(world.store, job_id, world.clock.now())
    for _ in range(3):
        world.tick()
    assert world.job(job_id).state == "CANCELLED"


def test_the_cap_holds_for_new_specs_only():
    with pytest.raises(SpecError):
        parse_spec("run: x\nspot: {max_wait: 36500d, deadline: 36500d}\n")
    stored = {"run": "x", "spot": {"max_wait": HUNDRED_YEARS, "deadline": HUNDRED_YEARS}}
    spec = JobSpec.stored(stored)
    assert (spec.spot.max_wait, spec.spot.deadline) == (HUNDRED_YEARS, HUNDRED_YEARS)
