"""A running spot attempt follows its zone's price as the cloud quotes it (`control/repricing.py`): the seconds
held before the price moved are billed at the old price, the rest at the new one, and the ledger, the API's
attempts and the fleet's totals agree."""

from __future__ import annotations

import pytest
from world import SPEC

from spotrun.control.controller import Controller
from spotrun.costs import ledger
from spotrun.costs.market_prices import MarketPrices
from spotrun.server.fleet_totals import fleet_bill
from spotrun.server.views import attempt_views
from spotrun.state import Event

PATIENT = {"heartbeat_timeout": 4 * 3600.0, "boot_timeout": 4 * 3600.0}
QUOTE_LASTS = 60.0


class Quotes:
    """What the in-memory cloud quotes for spot per zone; `failing`: the quote raises, as a missing permission does."""

    def __init__(self) -> None:
        self.zones = {"m-a": 0.7, "m-b": 1.1, "m-c": 0.9}
        self.failing = False

    def __call__(self, instance_type: str) -> dict[str, float]:
        if self.failing:
            raise RuntimeError("UnauthorizedOperation: ec2:DescribeSpotPriceHistory")
        return dict(self.zones)


@pytest.fixture
def quoted(world):
    quotes = Quotes()
    world.cloud.spot_prices = quotes
    settings = world.new_controller(**PATIENT).settings
    world.controller = Controller(
        world.store, settings, clock=world.clock, provider_factory=lambda name: world.cloud,
        prices=MarketPrices(lambda name: world.cloud, ttl=QUOTE_LASTS, clock=world.clock.now),
    )
    world.quotes = quotes
    return world


def on_spot_for(world, seconds: float, spec: str = SPEC) -> int:
    job_id = world.submit(spec)
    world.run_to_running(job_id)
    world.tick(seconds)
    return job_id


def moved_events(world) -> list[Event]:
    with world.store.session() as session:
        return list(session.query(Event).filter(Event.kind == "spot_price_moved"))


def test_a_moved_price_bills_the_seconds_before_at_the_old_price_and_after_at_the_new(quoted):
    world = quoted
    job_id = on_spot_for(world, 1000)
    [attempt] = world.attempts(job_id)
    assert (attempt.zone, attempt.price_per_hour, attempt.earlier_price_seconds) == ("m-a", 0.7, 0.0)
    world.quotes.zones["m-a"] = 0.95
    world.tick(QUOTE_LASTS)  # the quote is asked again
    [attempt] = world.attempts(job_id)
    before = world.clock.now() - attempt.started_at
    assert attempt.price_per_hour == 0.95
    assert attempt.earlier_price_seconds == pytest.approx(before, abs=1e-6)
    assert attempt.earlier_price_dollars == pytest.approx(before / 3600 * 0.7, abs=1e-9)
    [moved] = moved_events(world)
    assert moved.data == {"zone": "m-a", "from": 0.7, "to": 0.95} and "was $0.7000/h" in moved.message
    world.tick(3600)
    now = world.clock.now()
    expected = before / 3600 * 0.7 + 3600 / 3600 * 0.95
    [attempt] = world.attempts(job_id)
    assert ledger.attempt_cost(attempt, now) == pytest.approx(expected, abs=1e-9)
    assert attempt_views([attempt], now)[0].cost == pytest.approx(expected, abs=1e-9)
    with world.store.session() as session:
        assert fleet_bill(session, now).cost == pytest.approx(expected, abs=1e-9)
    assert ledger.bill([attempt], now).on_demand_cost == pytest.approx((before + 3600) / 3600 * 3.06, abs=1e-9)


def test_a_price_that_moves_twice_keeps_each_stretch_at_its_price(quoted):
    world = quoted
    job_id = on_spot_for(world, 600)
    started = world.attempts(job_id)[0].started_at
    stretches = []
    for price in (0.8, 0.6):
        world.quotes.zones["m-a"] = price
        world.tick(QUOTE_LASTS)
        stretches.append(world.clock.now() - started)
    world.tick(1200)
    world.agent(world.attempts(job_id)[0].instance_id)("exit", {"outcome": "succeeded", "exit_code": 0})
    world.tick()
    [attempt] = world.attempts(job_id)
    assert attempt.ended_at is not None and attempt.price_per_hour == 0.6
    first, second = stretches
    expected = (first * 0.7 + (second - first) * 0.8 + (attempt.billed_seconds - second) * 0.6) / 3600
    assert ledger.attempt_cost(attempt, world.clock.now()) == pytest.approx(expected, abs=1e-9)
    assert len(moved_events(world)) == 2


def test_a_quote_that_fails_leaves_the_price_as_it_was(quoted):
    world = quoted
    job_id = on_spot_for(world, 100)
    world.quotes.failing = True
    world.tick(QUOTE_LASTS)
    world.tick(QUOTE_LASTS)
    [attempt] = world.attempts(job_id)
    assert (attempt.price_per_hour, attempt.earlier_price_seconds) == (0.7, 0.0)  # not the catalog's in its stead
    assert moved_events(world) == []


def test_a_job_that_names_its_own_prices_is_never_repriced(quoted):
    world = quoted
    own = SPEC.replace("instance_type: local.cpu}", "instance_type: local.cpu, prices: {spot: 0.5, on_demand: 2.0}}")
    job_id = on_spot_for(world, 100, own)
    world.quotes.zones = {zone: 0.99 for zone in world.quotes.zones}
    world.tick(QUOTE_LASTS)
    [attempt] = world.attempts(job_id)
    assert attempt.price_per_hour == 0.5 and moved_events(world) == []


def test_on_demand_is_never_repriced(quoted):
    world = quoted
    on_demand = SPEC.replace("spot: {", "spot: {use_spot: false, ")
    job_id = on_spot_for(world, 100, on_demand)
    [attempt] = world.attempts(job_id)
    assert attempt.market == "on-demand"
    world.quotes.zones = {zone: 0.1 for zone in world.quotes.zones}
    world.tick(QUOTE_LASTS)
    assert world.attempts(job_id)[0].price_per_hour == attempt.price_per_hour and moved_events(world) == []


def test_the_clouds_rule_scales_the_attempts_mean_price():
    """A repriced spot instance EC2 took back in its first hour is still free; one held less than the minimum is
    charged the minimum at its mean price."""
    from types import SimpleNamespace

    def repriced(**fields):
        base = dict(market="spot", price_per_hour=1.0, on_demand_price_per_hour=3.0, started_at=0.0, ended_at=40.0,
                    billed_seconds=40.0, charged_seconds=None, earlier_price_seconds=20.0, earlier_price_dollars=20 / 3600 * 0.5)
        return SimpleNamespace(**{**base, **fields})

    assert ledger.attempt_cost(repriced(), 40.0) == pytest.approx((20 * 0.5 + 20 * 1.0) / 3600)
    assert ledger.attempt_cost(repriced(charged_seconds=0.0), 40.0) == 0.0
    assert ledger.attempt_cost(repriced(charged_seconds=60.0), 40.0) == pytest.approx(60 * 0.75 / 3600)


def test_each_node_of_a_gang_follows_its_zones_price(quoted):
    from gang_world import GANG, alive_for, running_gang

    world = quoted
    nodes = running_gang(world, GANG)
    zone = nodes[0].zone
    alive_for(world, nodes, 200)
    world.quotes.zones[zone] = 0.5
    alive_for(world, nodes, QUOTE_LASTS + 20)
    repriced = [a for a in world.attempts(1) if a.ended_at is None]
    assert len(repriced) == 3 and {a.price_per_hour for a in repriced} == {0.5}
    assert all(a.earlier_price_seconds > 200 for a in repriced) and len(moved_events(world)) == 3


def test_a_price_that_moves_while_the_instance_cannot_be_asked_about_is_not_followed(quoted, monkeypatch):
    """The cloud took the instance at 1,000 s and describe failed for 10 minutes while the quote doubled: the move
    was recorded at 1,300 s held, and the attempt billed seconds after its instance was gone at the new price."""
    world = quoted
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.tick(998)
    world.cloud.reclaim(instance)
    real_describe, broken = world.cloud.describe, [True]
    monkeypatch.setattr(world.cloud, "describe",
                        lambda instance_id: (_ for _ in ()).throw(RuntimeError("RequestLimitExceeded")) if broken[0]
                        else real_describe(instance_id))
    world.quotes.zones = {zone: 2 * price for zone, price in world.quotes.zones.items()}
    world.tick(300)
    world.tick(300)
    broken[0] = False
    world.tick(1)
    [attempt] = world.attempts(job_id)[:1]
    assert attempt.end_reason == "preempted" and attempt.earlier_price_seconds == 0
    assert moved_events(world) == []
    assert ledger.attempt_cost(attempt, world.clock.now()) == pytest.approx(attempt.billed_seconds / 3600 * 0.7)
