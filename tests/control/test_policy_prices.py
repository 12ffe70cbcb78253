"""The job's prices reach its policy, whatever the instance type: a deadline plan weighs spot's share of the
on-demand price, and planned with p3.2xlarge's share for every job it chased spot that barely saves."""

import pytest

from world import DEADLINE_SPEC, alive_for

from spotrun.policy import Keep, Launch


@pytest.mark.parametrize("given, spot, on_demand", [(None, 1.0, 3.0), ("{on_demand: 4.0, spot: 3.8}", 3.8, 4.0)])
def test_the_policy_weighs_the_jobs_own_prices(world, scripted, given, spot, on_demand):
    # the test cloud's catalog (None), or the job file's own prices
    spec = DEADLINE_SPEC
    if given is not None:
        spec = spec.replace("instance_type: local.cpu}", f"instance_type: local.cpu, prices: {given}}}")
    job_id = world.submit(spec)
    scripted.placement = Launch("m-a", "on-demand", "on-demand first")
    instance = world.run_to_running(job_id)
    placed = scripted.placed_context
    assert (placed.spot_price, placed.on_demand_price) == (spot, on_demand)
    scripted.answer = Keep("stay")
    alive_for(world, instance, 120)  # asked about the job running on on-demand: spot at the job's price
    running = scripted.last_context
    assert running.current.market == "on-demand"
    assert (running.spot_price, running.on_demand_price) == (spot, on_demand)


def test_a_job_whose_prices_are_not_known_leaves_the_policy_its_default_share():
    from spotrun.control.placement import policy_prices
    from spotrun.costs.catalog import UnknownPrice
    from spotrun.spec import parse_spec

    def no_prices(*_):
        raise UnknownPrice("no prices here")

    assert policy_prices(parse_spec(DEADLINE_SPEC), no_prices) == {}
