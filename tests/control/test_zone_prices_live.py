"""The controller tells a job's policy what spot costs in each zone and the most the job pays for it: spot is
launched in the cheapest zone, at that zone's price, and a zone priced above the job's cap is never asked."""

import pytest

import world as world_module
from world import DEADLINE_SPEC, SPEC

from spotrun.control.controller import Controller

ZONE_SPOT = {"m-a": 0.8, "m-b": 1.2, "m-c": 1.0}  # the first job's own order is m-b, m-c, m-a


def zone_prices(cloud, instance_type, market, zone, accelerators=None):
    if market == "on-demand":
        return 3.0, 3.0
    return (1.0 if zone is None else ZONE_SPOT[zone]), 3.0


@pytest.fixture
def priced(world, monkeypatch):
    monkeypatch.setattr(world_module, "prices", zone_prices)
    world.controller = world.new_controller()
    return world


def test_spot_is_launched_in_the_cheapest_zone_at_its_price(priced):
    job_id = priced.submit()
    priced.tick()
    [attempt] = priced.attempts(job_id)
    assert (attempt.market, attempt.zone, attempt.price_per_hour) == ("spot", "m-a", 0.8)


def test_the_policy_is_told_each_zones_spot_price_and_the_cap(priced, scripted):
    priced.submit(DEADLINE_SPEC)
    priced.tick()
    placed = scripted.placed_context
    assert dict(placed.spot_prices) == ZONE_SPOT
    assert (placed.spot_price, placed.max_spot_price) == (1.0, 3.0)  # no cap given: on-demand's price
    capped = DEADLINE_SPEC.replace("max_wait: 2h,", "max_wait: 2h, max_price: 0.9,")
    priced.submit(capped)
    priced.tick()
    assert scripted.placed_context.max_spot_price == 0.9


def test_a_zone_priced_above_the_cap_is_never_asked(priced):
    priced.cloud.capacity["m-a"] = False  # the one zone within the cap has no spot
    job_id = priced.submit(SPEC.replace("max_wait: 2h", "max_wait: 2h, max_price: 0.9"))
    for _ in range(12):
        priced.tick(3.0)
    asked = [(request.zone, request.market) for request in priced.cloud.requests]
    assert ("m-a", "spot") in asked
    assert not any(zone != "m-a" and market == "spot" for zone, market in asked)
    [*_, last] = priced.attempts(job_id)
    assert last.market == "on-demand"  # no spot at the price in any zone, twice: the job's fallback


def test_by_default_spot_is_priced_at_the_clouds_quote_for_the_zone(world):
    quotes = {"m-a": 0.7, "m-b": 1.1, "m-c": 0.9}  # the cheapest last in the first job's own order
    asked = []

    def spot_prices(instance_type):
        asked.append(instance_type)
        return quotes

    world.cloud.spot_prices = spot_prices
    world.controller = Controller(
        world.store, world.controller.settings, clock=world.clock, provider_factory=lambda name: world.cloud,
    )
    first, second = world.submit(), world.submit()
    world.tick()
    for job_id in (first, second):
        [attempt] = world.attempts(job_id)
        assert (attempt.market, attempt.zone, attempt.price_per_hour) == ("spot", "m-a", 0.7)
        assert attempt.on_demand_price_per_hour == 3.06  # the catalog's local.cpu
    assert asked == ["local.cpu"]  # one quote for both placements
