"""The store-wide totals /metrics reports are summed by the database; they must equal what the ledger and a walk over
every job's placed attempts give, on SQLite and on PostgreSQL, whatever the attempts' histories."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import insert, select

from spotrun.costs.ledger import bill
from spotrun.server import fleet_totals
from spotrun.state import Attempt, Job, Store

BOUNDS = (5.0, 30.0, 120.0)
NOW = 50_000.0
END_REASONS = ("preempted", "preempted", "succeeded", "failed", "lost", "cancelled", "released", None)
JOB_STATES = ("RUNNING", "SUCCEEDED", "PENDING", "FAILED", "CANCELLED", "PREEMPTED")
OUTCOMES = {"succeeded": {"SUCCEEDED"}, "unended": {"RUNNING", "PENDING", "PREEMPTED"},
            "without_result": {"FAILED", "CANCELLED"}}
BILL_FIELDS = ("spot_seconds", "on_demand_seconds", "cost", "on_demand_cost", "unpriced_attempts")


def walked_recoveries(attempts: list[Attempt]) -> list[float]:
    """The definition, as a walk: each job node's placed attempts by number; an agent start recovers from the newest
    preemption not yet recovered from (its notice, else its end)."""
    recovered: list[float] = []
    preempted_at: float | None = None
    node = None
    for attempt in sorted(attempts, key=lambda a: (a.job_id, a.node_rank, a.number)):
        if (attempt.job_id, attempt.node_rank) != node:
            preempted_at, node = None, (attempt.job_id, attempt.node_rank)
        if preempted_at is not None and attempt.agent_started_at is not None:
            recovered.append(max(attempt.agent_started_at - preempted_at, 0.0))
            preempted_at = None
        if attempt.end_reason == "preempted":
            preempted_at = attempt.notice_at or attempt.ended_at
    return recovered


def random_history(rng: random.Random, job_id: int) -> list[dict]:
    """A job's attempts: refused tries, instances whose agent never started, preemptions with and without notice,
    replacements preempted before their agent ran, some still running, charged as held, less or more, agents
    started before the preemption they recover from (a make-before-break move)."""
    rows, at = [], 1_000.0 * job_id
    for number in range(1, rng.randint(1, 9)):
        at += rng.uniform(1, 300)
        placed = rng.random() < 0.8
        reason = rng.choice(END_REASONS) if placed else "no_capacity"
        ended = None if reason is None else at + rng.uniform(0, 2_000)
        rows.append(dict(
            job_id=job_id, number=number, state="ended" if ended else "running", provider="local", zone="local-a",
            market=rng.choice(("spot", "on-demand")), instance_type="local.cpu",
            price_per_hour=rng.choice((0.3, 1.2)), on_demand_price_per_hour=3.06,
            client_token=f"t-{job_id}-{number}", token_hash="-", created_at=at,
            started_at=at if placed else None,
            agent_started_at=at + rng.uniform(-600, 200) if placed and rng.random() < 0.7 else None,
            notice_at=ended - rng.uniform(0, 120) if reason == "preempted" and rng.random() < 0.6 else None,
            ended_at=ended, end_reason=reason,
            billed_seconds=(ended - at) if placed and ended else 0.0, log_bytes=0, node_rank=0,
            # what the cloud charged: as held (rows from before the rules), nothing (a free interruption), a minimum
            charged_seconds=rng.choice((None, 0.0, max(ended - at, 60.0))) if placed and ended else None,
            **repriced(rng, at, ended),
        ))
        at = ended or at
    return rows


def repriced(rng: random.Random, started: float, ended: float | None) -> dict:
    """A third of the attempts had their spot price moved: some seconds held at earlier prices, some of them more
    than were held by the end (a controller's clock a little ahead of the one that ended it)."""
    if rng.random() < 2 / 3:
        return {}
    seconds = rng.uniform(0, ((ended or NOW) - started) * 1.1)
    return {"earlier_price_seconds": seconds, "earlier_price_dollars": seconds / 3600 * rng.choice((0.25, 0.4))}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_totals_equal_the_ledger_and_a_walk_over_every_job(store: Store, seed: int) -> None:
    rng = random.Random(seed)
    with store.session() as session:
        session.execute(insert(Job), [
            dict(id=j, name=f"j{j}", owner="alice", spec={}, state=rng.choice(JOB_STATES),
                 created_at=0.0, updated_at=0.0) for j in range(1, 41)
        ])
        session.execute(insert(Attempt), [row for j in range(1, 41) for row in random_history(rng, j)])
    with store.session() as session:
        placed = list(session.scalars(select(Attempt).where(Attempt.started_at.is_not(None))))
        states = list(session.scalars(select(Job.state)))
        recoveries = fleet_totals.recoveries(session, BOUNDS)
        totals = fleet_totals.fleet_bill(session, NOW)
        by_outcome = fleet_totals.fleet_bill_by_outcome(session, NOW)
        preemptions = fleet_totals.preemptions(session)
        by_state = fleet_totals.jobs_by_state(session)
        state_of = dict(session.execute(select(Job.id, Job.state)).all())
    walked, ledger = walked_recoveries(placed), bill(placed, NOW)

    assert len(walked) > 10 and sum(a.ended_at is None for a in placed) > 0  # the histories hold what is compared
    assert sum(a.earlier_price_seconds > 0 and bool(a.charged_seconds) for a in placed) > 5
    assert recoveries.count == len(walked)
    assert recoveries.seconds == pytest.approx(sum(walked))
    assert recoveries.at_most == {bound: sum(s <= bound for s in walked) for bound in BOUNDS}
    assert preemptions == sum(a.end_reason == "preempted" for a in placed)
    assert by_state == {state: states.count(state) for state in set(states)}
    for field in BILL_FIELDS:
        assert getattr(totals, field) == pytest.approx(getattr(ledger, field)), field
    for outcome, states_in in OUTCOMES.items():  # the ledger over the attempts of the jobs that stand so
        part = bill([a for a in placed if state_of[a.job_id] in states_in], NOW)
        assert part.cost > 0, outcome
        for field in BILL_FIELDS:
            assert getattr(getattr(by_outcome, outcome), field) == pytest.approx(getattr(part, field)), (outcome, field)


def test_the_newest_of_two_preemptions_before_an_agent_start_is_the_one_recovered_from(store: Store) -> None:
    def attempt(number: int, agent: float | None, reason: str | None, ended: float | None) -> dict:
        return dict(job_id=1, number=number, state="ended", provider="local", zone="a", market="spot",
                    instance_type="x", price_per_hour=1.0, on_demand_price_per_hour=3.0, client_token=f"t{number}",
                    token_hash="-", created_at=0.0, started_at=number * 100.0, agent_started_at=agent,
                    ended_at=ended, end_reason=reason, billed_seconds=0.0, log_bytes=0, node_rank=0)

    with store.session() as session:
        session.execute(insert(Job), [dict(id=1, name="j", owner="a", spec={}, state="RUNNING", created_at=0.0,
                                           updated_at=0.0)])
        session.execute(insert(Attempt), [
            attempt(1, 105.0, "preempted", 190.0),  # ran, preempted
            attempt(2, None, "preempted", 260.0),  # replacement preempted before its agent started
            attempt(3, None, "no_capacity", 270.0) | {"started_at": None},  # a refused try between: not placed
            attempt(4, 400.0, None, None),
        ])
    with store.session() as session:
        recoveries = fleet_totals.recoveries(session, BOUNDS)
    assert (recoveries.count, recoveries.seconds) == (1, 140.0)


def test_each_node_of_a_gang_recovers_from_its_own_preemption(store: Store) -> None:
    """A gang launches again only its lost nodes, so its attempts by number interleave the nodes: read in that order,
    node 1's first attempt (its agent started long before) was taken for a 0 s recovery from node 0's preemption, and
    node 0's replacement, numbered after node 1's, recovered from nothing."""
    def attempt(number: int, node: int, agent: float, notice: float | None = None) -> dict:
        return dict(job_id=1, number=number, node_rank=node, state="ended" if notice else "running", provider="local",
                    zone="a", market="spot", instance_type="x", price_per_hour=1.0, on_demand_price_per_hour=3.0,
                    client_token=f"t{number}", token_hash="-", created_at=0.0, started_at=agent - 5,
                    agent_started_at=agent, notice_at=notice, ended_at=notice and notice + 10,
                    end_reason="preempted" if notice else None, billed_seconds=0.0, log_bytes=0)

    with store.session() as session:
        session.execute(insert(Job), [dict(id=1, name="j", owner="a", spec={"resources": {"nodes": 2}},
                                           state="RUNNING", created_at=0.0, updated_at=0.0)])
        session.execute(insert(Attempt), [
            attempt(1, node=0, agent=100.0, notice=400.0),  # node 0, preempted last
            attempt(2, node=1, agent=100.0, notice=200.0),  # node 1, preempted first
            attempt(3, node=1, agent=260.0),  # node 1 again, 60 s after its notice
            attempt(4, node=0, agent=450.0),  # node 0 again, 50 s after its notice
        ])
    with store.session() as session:
        recoveries = fleet_totals.recoveries(session, BOUNDS)
    assert (recoveries.count, recoveries.seconds) == (2, 110.0)
    assert recoveries.at_most == {5.0: 0, 30.0: 0, 120.0: 2}


def test_an_attempt_stored_at_a_price_no_instance_has_is_left_out_of_the_totals_and_counted(store: Store) -> None:
    """Jobs stored before prices were capped: 1e308 $/h summed to inf on SQLite (its saving NaN), and PostgreSQL
    refused the product ("value out of range"), failing the whole scrape. The other attempts are summed as before."""
    def attempt(job_id: int, number: int, **stored: float) -> dict:
        return dict(job_id=job_id, number=number, state="ended", provider="local", zone="a", market="spot",
                    instance_type="x", price_per_hour=1.0, on_demand_price_per_hour=3.0, client_token=f"t{job_id}-{number}",
                    token_hash="-", created_at=0.0, started_at=0.0, ended_at=7_200.0, end_reason="failed",
                    billed_seconds=7_200.0, log_bytes=0, node_rank=0) | stored

    with store.session() as session:
        session.execute(insert(Job), [dict(id=j, name=f"j{j}", owner="a", spec={}, state="FAILED", created_at=0.0,
                                           updated_at=0.0) for j in (1, 2)])
        session.execute(insert(Attempt), [
            attempt(1, 1, price_per_hour=1e308, on_demand_price_per_hour=1e308),
            attempt(1, 2, on_demand_price_per_hour=1e308),
            attempt(1, 3, earlier_price_seconds=3_600.0, earlier_price_dollars=1e308),  # before its price moved
            attempt(2, 1), attempt(2, 2, earlier_price_seconds=3_600.0, earlier_price_dollars=0.5),
        ])
    with store.session() as session:
        totals = fleet_totals.fleet_bill(session, NOW)
        ledger = bill(session.scalars(select(Attempt)).all(), NOW)

    assert totals.unpriced_attempts == ledger.unpriced_attempts == 3
    assert totals.cost == pytest.approx(2.0 + 0.5 + 1.0) and totals.on_demand_cost == pytest.approx(12.0)
    for field in ("spot_seconds", "on_demand_seconds", "cost", "on_demand_cost"):
        assert getattr(totals, field) == pytest.approx(getattr(ledger, field)), field
