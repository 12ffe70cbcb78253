import pytest

from spotrun.policy import DefaultPolicy, GiveUp, Keep, Launch, PastAttempt, Placement, PlacementContext, Wait

ZONES = ("z-a", "z-b", "z-c")


def ctx(history=(), capacity_rounds=0, now=10_000.0, **over):
    base = dict(
        job_id=7, now=now, zones=ZONES, use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=3600.0, capacity_rounds=capacity_rounds, history=tuple(history),
    )
    base.update(over)
    return PlacementContext(**base)


def miss(zone, t=9_000.0):
    return PastAttempt(zone, "spot", t, None, t, "no_capacity")


def ran(zone, reason, ended=9_000.0, market="spot"):
    return PastAttempt(zone, market, ended - 100, ended - 100, ended, reason)


def test_first_placement_is_spot_in_the_jobs_shuffled_order():
    decision = DefaultPolicy().place(ctx())
    assert isinstance(decision, Launch) and decision.market == "spot"
    other_job = DefaultPolicy().place(ctx(job_id=8))
    assert {decision.zone, other_job.zone} <= set(ZONES)


def test_no_capacity_moves_to_the_next_zone_then_waits_with_backoff():
    policy = DefaultPolicy(backoff_base=5, backoff_max=40)
    tried = []
    history = []
    for _ in ZONES:
        decision = policy.place(ctx(history))
        assert isinstance(decision, Launch)
        tried.append(decision.zone)
        history.append(miss(decision.zone))
    assert sorted(tried) == sorted(ZONES)
    waited = DefaultPolicy(backoff_base=5, backoff_max=40, empty_rounds_before_fallback=99).place(ctx(history))
    assert isinstance(waited, Wait) and waited.until == 10_000.0 + 5
    # after waiting, a new round starts in the same order
    again = policy.place(ctx(history, capacity_rounds=1, waited_until=9_500.0))
    assert isinstance(again, Launch) and (again.zone, again.market) == (tried[0], "spot")
    later = DefaultPolicy(backoff_base=5, backoff_max=40, empty_rounds_before_fallback=99).place(
        ctx(history * 4, capacity_rounds=3)
    )
    assert isinstance(later, Wait) and later.until == 10_000.0 + 40  # capped


def test_all_zones_empty_twice_falls_back_to_on_demand():
    history = [miss(z) for z in ZONES] * 2
    decision = DefaultPolicy().place(ctx(history, capacity_rounds=1))
    assert isinstance(decision, Launch) and decision.market == "on-demand"


def test_a_gangs_nodes_given_back_after_another_node_was_refused_count_neither_as_run_nor_as_miss():
    def refused_gang(zone):  # node 0 refused, nodes 1 and 2 given back unlaunched
        return [miss(zone), PastAttempt(zone, "spot", 9_000.0, None, 9_000.0, "released"),
                PastAttempt(zone, "spot", 9_000.0, None, 9_000.0, "released")]

    history = [attempt for zone in ZONES for attempt in refused_gang(zone)]
    waited = DefaultPolicy().place(ctx(history))
    assert isinstance(waited, Wait), "one whole round without capacity, as for a single node"
    fell_back = DefaultPolicy().place(ctx(history * 2, capacity_rounds=1))
    assert isinstance(fell_back, Launch) and fell_back.market == "on-demand"


def test_with_fallback_wait_it_never_goes_on_demand():
    history = [miss(z) for z in ZONES] * 3
    decision = DefaultPolicy().place(ctx(history, capacity_rounds=2, fallback="wait"))
    assert isinstance(decision, Wait)
    preempted = [ran("z-a", "preempted", ended=9_000.0 + i) for i in range(5)]
    assert DefaultPolicy().place(ctx(preempted, fallback="wait")).market == "spot"


def test_k_preemptions_in_the_window_fall_back_to_on_demand():
    two = [ran("z-a", "preempted", ended=8_000.0), ran("z-b", "preempted", ended=8_500.0)]
    assert DefaultPolicy().place(ctx(two)).market == "spot"
    three = [*two, ran("z-c", "preempted")]
    decision = DefaultPolicy().place(ctx(three))
    assert decision.market == "on-demand" and "3 preemptions" in decision.reason


def test_old_preemptions_fall_out_of_the_window():
    old = [ran("z-a", "preempted", ended=1_000.0 + i) for i in range(5)]
    assert DefaultPolicy().place(ctx(old)).market == "spot"


def test_after_a_preemption_the_next_try_is_another_zone():
    for zone in ZONES:
        decision = DefaultPolicy().place(ctx([ran(zone, "preempted")]))
        assert decision.zone != zone


def test_no_spot_asked_means_on_demand_and_no_zone_means_give_up():
    assert DefaultPolicy().place(ctx(use_spot=False)).market == "on-demand"
    assert isinstance(DefaultPolicy().place(ctx(zones=())), GiveUp)


def first_choice(**over):
    decision = DefaultPolicy().place(ctx(**over))
    assert isinstance(decision, Launch) and decision.market == "spot"
    return decision.zone


def test_another_jobs_recent_no_capacity_or_preemption_puts_that_zone_last_until_the_news_is_old():
    own = first_choice()
    for bad in (miss(own, t=9_900.0), ran(own, "preempted", ended=9_900.0)):
        assert first_choice(market=(bad,)) != own
    old = miss(own, t=10_000.0 - DefaultPolicy().zone_news_lasts - 1)
    assert first_choice(market=(old,)) == own


def test_a_zone_where_another_job_runs_spot_comes_first_however_long_it_has_run():
    own = first_choice()
    for zone in ZONES:
        running = PastAttempt(zone, "spot", 100.0, 100.0, None, None)  # started hours ago, still running
        assert first_choice(market=(running,)) == zone
    on_demand = PastAttempt(next(z for z in ZONES if z != own), "on-demand", 100.0, 100.0, None, None)
    assert first_choice(market=(on_demand,)) == own  # on-demand capacity says nothing about spot


def test_the_latest_news_of_a_zone_wins_and_a_running_spot_instance_is_news_of_now():
    own = first_choice()
    other = next(z for z in ZONES if z != own)
    ran_until = PastAttempt(other, "spot", 100.0, 100.0, 9_800.0, "succeeded")
    assert first_choice(market=(ran_until,)) == other
    assert first_choice(market=(ran_until, miss(other, t=9_900.0))) != other
    still_running = PastAttempt(other, "spot", 100.0, 100.0, None, None)
    assert first_choice(market=(still_running, miss(other, t=9_900.0))) == other
    back_later = PastAttempt(own, "spot", 9_500.0, 9_500.0, None, None)
    assert first_choice(market=(miss(own, t=9_000.0), back_later)) == own


@pytest.mark.parametrize("others_get_spot", [True, False], ids=["tried-zones-move-first", "tried-zones-move-last"])
def test_a_round_tries_every_zone_once_even_when_the_news_reorders_zones_within_it(others_get_spot):
    """Each refusal puts its zone last (the latest news), or another job then gets spot there and it moves first: the
    round still tries each zone once, as a zone is skipped for having been tried, not for where it stands."""
    policy = DefaultPolicy(empty_rounds_before_fallback=99)
    history, market, tried = [], [], []
    for i in range(len(ZONES)):
        decision = policy.place(ctx(history, market=tuple(market), now=10_000.0 + i))
        assert isinstance(decision, Launch)
        tried.append(decision.zone)
        history.append(miss(decision.zone, t=10_000.0 + i))
        if others_get_spot:
            market.append(PastAttempt(decision.zone, "spot", 10_000.5 + i, 10_000.5 + i, None, None))
    assert sorted(tried) == sorted(ZONES)
    assert isinstance(policy.place(ctx(history, market=tuple(market), now=10_010.0)), Wait)


def on_demand_since(since, zone="z-a"):
    return Placement(zone, "on-demand", since)


def fell_back(now, preempted_at=(), **over):
    """A job on on-demand since 10,000 s, after three preemptions just before."""
    times = preempted_at or (9_500.0, 9_700.0, 9_900.0)
    history = [ran(zone, "preempted", ended=t) for zone, t in zip(ZONES, times)]
    history.append(PastAttempt("z-a", "on-demand", 10_000.0, 10_000.0, None, None))
    return ctx(history + list(over.pop("more", ())), now=now, current=on_demand_since(10_000.0), **over)


def test_a_job_that_fell_back_to_on_demand_keeps_it_for_a_fallback_window():
    assert isinstance(DefaultPolicy().decide(fell_back(now=10_000.0 + 3_000)), Keep)
    assert isinstance(DefaultPolicy().decide(ctx(now=20_000.0, current=on_demand_since(10_000.0), use_spot=False)), Keep)
    assert isinstance(DefaultPolicy().decide(ctx(now=20_000.0, current=on_demand_since(10_000.0), fallback="wait")), Keep)
    on_spot = ctx(now=20_000.0, current=Placement("z-a", "spot", 10_000.0))
    assert isinstance(DefaultPolicy().decide(on_spot), Keep)


def test_then_it_tries_spot_again_in_a_zone_without_bad_news():
    decision = DefaultPolicy().decide(fell_back(now=10_000.0 + 3_700))
    assert isinstance(decision, Launch) and decision.market == "spot" and "trying spot" in decision.reason
    # a refused try puts its zone out of the running for the news' hour; the next try is another zone
    refused = DefaultPolicy().decide(fell_back(now=13_800.0, more=[miss(decision.zone, t=13_750.0)]))
    assert isinstance(refused, Launch) and refused.zone != decision.zone


def test_it_stays_on_on_demand_while_every_zone_had_spot_refused_or_lost_lately():
    refusals = [miss(z, t=13_000.0 + i) for i, z in enumerate(ZONES)]
    assert isinstance(DefaultPolicy().decide(fell_back(now=13_700.0, more=refusals)), Keep)
    assert isinstance(DefaultPolicy().decide(fell_back(now=13_000.0 + 3_700, more=refusals)), Launch)


def test_each_return_to_spot_that_ended_on_on_demand_again_doubles_the_hold():
    returned = [PastAttempt("z-b", "on-demand", 1_000.0, 1_000.0, 5_000.0, "migrated")]
    assert isinstance(DefaultPolicy().decide(fell_back(now=10_000.0 + 3_700, more=returned)), Keep)
    assert isinstance(DefaultPolicy().decide(fell_back(now=10_000.0 + 7_300, more=returned)), Launch)
    many = [PastAttempt("z-b", "on-demand", t, t, t + 300, "migrated") for t in range(1_000, 5_000, 400)]
    assert isinstance(DefaultPolicy().decide(fell_back(now=10_000.0 + 16 * 3_600 - 100, more=many)), Keep)
    assert isinstance(DefaultPolicy().decide(fell_back(now=10_000.0 + 16 * 3_600 + 100, more=many)), Launch)  # capped


def test_a_round_is_the_jobs_tries_since_its_latest_wait_ended():
    policy = DefaultPolicy(empty_rounds_before_fallback=99)
    earlier = [miss(z, t=9_000.0) for z in ZONES]  # the whole first round, before the wait that ended at 9,500
    first = policy.place(ctx(earlier, capacity_rounds=1, waited_until=9_500.0))
    assert isinstance(first, Launch) and first.market == "spot" and first.reason == "spot"
    this_round = [*earlier, miss(first.zone, t=9_600.0)]
    second = policy.place(ctx(this_round, capacity_rounds=1, waited_until=9_500.0))
    assert isinstance(second, Launch) and second.zone != first.zone and "after 1 without" in second.reason
    everything = [*this_round, miss(second.zone, t=9_650.0)]
    everything += [miss(z, t=9_700.0) for z in ZONES if z not in (first.zone, second.zone)]
    assert isinstance(policy.place(ctx(everything, capacity_rounds=1, waited_until=9_500.0)), Wait)


def other_refused(zone, t, reason="no_capacity"):
    return PastAttempt(zone, "spot", t - 1, None, t, reason)


def test_a_zone_another_job_was_refused_in_within_this_jobs_wait_is_not_asked_again():
    """Ten jobs waiting in one market would otherwise each ask every zone every backoff_max: ten times the cloud API
    calls and the stored tries, for answers another job just had."""
    policy = DefaultPolicy(backoff_base=5, backoff_max=300, empty_rounds_before_fallback=99)
    now, delay = 10_000.0, 300.0  # after 6 waits the delay is at its cap
    first = policy.place(ctx(capacity_rounds=6, waited_until=now, now=now))
    assert isinstance(first, Launch)
    market = (other_refused(first.zone, now - delay + 1),)
    skipped = policy.place(ctx(capacity_rounds=6, waited_until=now, now=now, market=market))
    assert isinstance(skipped, Launch) and skipped.market == "spot" and skipped.zone != first.zone
    stale = tuple(other_refused(z, now - delay - 1) for z in ZONES)  # before this job's wait began: ask again
    assert policy.place(ctx(capacity_rounds=6, waited_until=now, now=now, market=stale)).market == "spot"
    everywhere = tuple(other_refused(z, now - 10) for z in ZONES)
    waited = policy.place(ctx(capacity_rounds=6, waited_until=now, now=now, market=everywhere))
    assert isinstance(waited, Wait) and waited.until == now + delay
    assert "3 refused to another job in the last 300 s" in waited.reason
    # a job that has just begun waits 5 s: only as fresh a refusal stops it asking
    fresh = policy.place(ctx(now=now, market=everywhere))
    assert isinstance(fresh, Launch) and fresh.market == "spot"


def test_only_the_latest_capacity_refusal_of_a_zone_stops_a_try_there():
    """Every other zone was just refused to another job; what news of the last one still lets this job try it."""
    policy = DefaultPolicy(empty_rounds_before_fallback=99)
    now = 10_000.0
    own = policy.place(ctx(capacity_rounds=6, waited_until=now, now=now)).zone
    elsewhere = [other_refused(z, now - 10) for z in ZONES if z != own]

    def tries_own_zone(*news):
        decision = policy.place(ctx(capacity_rounds=6, waited_until=now, now=now, market=(*elsewhere, *news)))
        assert isinstance(decision, (Launch, Wait))
        return isinstance(decision, Launch) and (decision.zone, decision.market) == (own, "spot")

    assert tries_own_zone()
    assert not tries_own_zone(other_refused(own, now - 10))
    assert tries_own_zone(other_refused(own, now - 10, "price_too_low"))  # this job may bid more
    assert tries_own_zone(ran(own, "preempted", ended=now - 10))  # no try was made there
    got_spot_after = PastAttempt(own, "spot", now - 5, now - 5, None, None)
    assert tries_own_zone(other_refused(own, now - 10), got_spot_after)
    ended_after = PastAttempt(own, "spot", now - 500, now - 500, now - 5, "succeeded")
    assert tries_own_zone(other_refused(own, now - 10), ended_after)
    preempted_after = PastAttempt(own, "spot", now - 500, now - 500, now - 5, "preempted")
    assert not tries_own_zone(other_refused(own, now - 10), preempted_after)  # it had spot before the refusal
