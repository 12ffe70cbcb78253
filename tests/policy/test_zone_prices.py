"""Spot's price differs from zone to zone (AWS prices each zone's spot apart): the policies launch spot in the cheaper
zone where nothing else tells the zones apart, never where spot costs more than the job pays for it, and the
deadline plan weighs the price of the zone it would launch in."""

import pytest

from spotrun.policy import (
    DefaultPolicy, GreedyPolicy, Keep, Launch, PastAttempt, Placement, PlacementContext, UniformProgressPolicy, Wait,
)
from spotrun.policy.deadline_aware import DeadlineAwarePolicy
from spotrun.policy.zones import spot_zone_order, spot_zones_to_try, zone_order

HOUR = 3600.0
ZONES = ("z-a", "z-b", "z-c")
PRICES = {"z-a": 1.02, "z-b": 0.95, "z-c": 0.9731}  # the local cloud's spread of p3.2xlarge's spot price


def ctx(**over):
    base = dict(
        job_id=7, now=10_000.0, zones=ZONES, use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, spot_price=0.9731, on_demand_price=3.06,
        spot_prices=PRICES,
    )
    base.update(over)
    return PlacementContext(**base)


def deadline_ctx(**over):
    base = dict(deadline=40 * HOUR, estimated_duration=20 * HOUR, restart_overhead=360.0, step=600.0)
    base.update(over)
    return ctx(**base)


def miss(zone, t=9_000.0):
    return PastAttempt(zone, "spot", t, None, t, "no_capacity")


@pytest.mark.parametrize("job_id", range(6))
def test_zones_with_the_same_news_go_cheapest_spot_first(job_id):
    assert zone_order(ctx(job_id=job_id)) == ["z-b", "z-c", "z-a"]
    assert DefaultPolicy().place(ctx(job_id=job_id)).zone == "z-b"


def test_without_zone_prices_each_job_keeps_its_own_order():
    firsts = {zone_order(ctx(job_id=job_id, spot_prices={}))[0] for job_id in range(12)}
    assert len(firsts) > 1


def test_news_of_spot_outranks_a_cheaper_price():
    # another job's spot is running in the dearest zone: spot is there now, a try elsewhere may be refused
    running = PastAttempt("z-a", "spot", 9_000.0, 9_060.0, None, None)
    assert zone_order(ctx(market=(running,)))[0] == "z-a"


def test_a_zone_whose_spot_costs_more_than_the_cap_is_never_tried():
    capped = dict(max_spot_price=1.0)
    assert spot_zone_order(ctx(**capped)) == ["z-b", "z-c"]
    first = DefaultPolicy().place(ctx(**capped))
    second = DefaultPolicy().place(ctx(history=(miss(first.zone),), **capped))
    assert (first.zone, second.zone) == ("z-b", "z-c")
    # both refused: the round is over without asking the cloud for z-a, which would refuse the price
    third = DefaultPolicy(empty_rounds_before_fallback=99).place(ctx(history=(miss("z-b"), miss("z-c")), **capped))
    assert isinstance(third, Wait)
    assert spot_zones_to_try(ctx(**capped)) == ["z-b", "z-c"]


def test_the_spot_instance_held_counts_as_within_the_cap():
    held = ctx(max_spot_price=1.0, current=Placement("z-a", "spot", 9_000.0))
    assert held.spot_within_cap("z-a") and not ctx(max_spot_price=1.0).spot_within_cap("z-a")


def test_spot_priced_out_everywhere_waits_or_falls_back_saying_why():
    capped = dict(max_spot_price=0.9)
    waited = DefaultPolicy(empty_rounds_before_fallback=99).place(ctx(**capped))
    assert isinstance(waited, Wait)
    assert "spot costs more than the job's max price ($0.9/h) in each of its 3 zones" in waited.reason
    fallen = DefaultPolicy().place(ctx(capacity_rounds=1, **capped))
    assert isinstance(fallen, Launch) and fallen.market == "on-demand" and "max price" in fallen.reason
    # with a deadline: on-demand at once (spot never comes at this price)
    planned = DefaultPolicy().place(deadline_ctx(**capped))
    assert isinstance(planned, Launch) and planned.market == "on-demand" and "max price" in planned.reason


@pytest.mark.parametrize("policy", [GreedyPolicy(), UniformProgressPolicy(), DeadlineAwarePolicy()])
def test_spot_is_launched_in_the_cheapest_zone_not_known_apart(policy):
    decision = policy.decide(deadline_ctx())
    assert isinstance(decision, Launch) and (decision.market, decision.zone) == ("spot", "z-b")
    # another job's spot runs in z-c, which the baselines take first, but above the job's cap
    running = (PastAttempt("z-c", "spot", 9_000.0, 9_060.0, None, None),)
    dearer = dict(spot_prices={"z-a": 1.02, "z-b": 1.05, "z-c": 1.1}, market=running)
    if not isinstance(policy, DeadlineAwarePolicy):  # which weighs the price against the chance (below)
        assert policy.decide(deadline_ctx(**dearer)).zone == "z-c"
    capped = policy.decide(deadline_ctx(max_spot_price=1.03, **dearer))
    assert isinstance(capped, Launch) and (capped.market, capped.zone) == ("spot", "z-a")


@pytest.mark.parametrize(("known", "other", "zone"), [(2.9, 0.9, "z-a"), (0.9731, 0.9731, "z-c")])
def test_the_deadline_plan_weighs_a_cheap_zone_against_a_dear_one_known_to_have_spot(known, other, zone):
    """Another job's spot runs in z-c, priced near on-demand; z-a's spot costs a third of that, not known either way.
    Planned at z-c's price alone, the job went on-demand; planned at each zone's own, it tries z-a. At one price in
    every zone, the zone known to have spot."""
    running = (PastAttempt("z-c", "spot", 9_000.0, 9_060.0, None, None),)
    prices = {"z-a": other, "z-b": 3.0, "z-c": known}
    decision = DeadlineAwarePolicy().decide(deadline_ctx(spot_prices=prices, market=running))
    assert isinstance(decision, Launch) and (decision.market, decision.zone) == ("spot", zone), decision


def short_lived_spot_history(now):
    """Spot in every zone launched and taken back after 10 minutes, over and over: a market where spot barely runs."""
    tries = []
    for k in range(12):
        t = now - (k + 1) * 1800.0
        for zone in ZONES:
            tries.append(PastAttempt(zone, "spot", t, t, t + 600.0, "preempted"))
    return tuple(sorted(tries, key=lambda a: a.created_at))


def test_the_deadline_plan_weighs_the_price_of_the_zone_it_would_launch_in():
    """Spot priced near on-demand in every zone is planned as such, whatever the job's reference spot price says;
    and the reference price alone plans otherwise in some of these situations (else the test would tell nothing)."""
    policy = DeadlineAwarePolicy()
    dear = {zone: 2.95 for zone in ZONES}
    differs = 0
    for now in (0.0, 4 * HOUR, 8 * HOUR, 12 * HOUR):
        for progress_share in (0.0, 0.25, 0.5):
            for held in (None, "on-demand"):
                common = dict(
                    now=now, progress=progress_share * 20 * HOUR, market=short_lived_spot_history(now),
                    current=None if held is None else Placement("z-a", held, now - HOUR),
                )
                by_zone = policy.decide(deadline_ctx(spot_prices=dear, **common))
                as_one = policy.decide(deadline_ctx(spot_price=2.95, spot_prices={}, **common))
                reference = policy.decide(deadline_ctx(spot_prices={}, **common))
                assert _market(by_zone) == _market(as_one), (now, progress_share, held)
                differs += _market(by_zone) != _market(reference)
    assert differs > 0


def _market(decision):
    if isinstance(decision, Keep):
        return "keep"
    return decision.market if isinstance(decision, Launch) else type(decision).__name__
