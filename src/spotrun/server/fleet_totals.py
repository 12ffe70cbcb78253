"""Totals over every job in the store, summed by the database: what /metrics reports at each scrape.

A team server keeps every attempt it ever made, so these read no rows into Python: a store of 50,000 finished jobs
took ~4 s a scrape when the attempts were loaded and summed here (docs/benchmarks.md, "A store that keeps
every job").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, case, func, literal, select
from sqlalchemy.orm import Session

from spotrun.control.states import JobState, ended_without_result
from spotrun.costs.ledger import MAX_PRICE_PER_HOUR, MAX_PRICE_PER_SECOND, JobBill
from spotrun.state import Attempt, Job

# Refused tries (no instance) count for none of these: they cost nothing, and a long wait for spot makes thousands.
PLACED = Attempt.started_at.is_not(None)

# `ledger.priced` in SQL, tested before any arithmetic (`_if_priced`): PostgreSQL refuses a product past a double's
# range (the whole scrape failed on "value out of range"), and SQLite summed it to inf.
PRICED = (
    (Attempt.price_per_hour <= MAX_PRICE_PER_HOUR) & (Attempt.on_demand_price_per_hour <= MAX_PRICE_PER_HOUR)
    & (Attempt.earlier_price_dollars <= Attempt.earlier_price_seconds * MAX_PRICE_PER_SECOND)
)


@dataclass(frozen=True)
class Recoveries:
    """Recoveries after preemptions: how many, their seconds summed, and how many took at most each bound."""

    count: int
    seconds: float
    at_most: dict[float, int]


def jobs_by_state(session: Session) -> Counter[str]:
    return Counter(dict(session.execute(select(Job.state, func.count()).group_by(Job.state)).all()))


def preemptions(session: Session) -> int:
    return session.scalar(select(func.count()).where(PLACED, Attempt.end_reason == "preempted")) or 0


def early_warnings(session: Session) -> Counter[tuple[str, str]]:
    """Attempts whose agent reported an early warning, by the warning ("<source>/<kind>") and how the attempt
    ended ("running" while it has not): how often EC2's rebalance recommendation came before an interruption, and
    how often a move got ahead of it ("migrated")."""
    ended = func.coalesce(Attempt.end_reason, "running")
    rows = session.execute(
        select(Attempt.warning, ended, func.count()).where(Attempt.warned_at.is_not(None))
        .group_by(Attempt.warning, ended)
    ).all()
    return Counter({(warning, end): count for warning, end, count in rows})


def recoveries(session: Session, bounds: tuple[float, ...]) -> Recoveries:
    """For each preemption followed, in the placed attempts of the job's node by number, by an attempt whose agent
    started: the seconds from the preemption (its notice, else its end) to that agent start. Of several preemptions
    before one agent start (a replacement preempted before its agent ran), the newest is the one recovered from."""
    seconds = _recovery_seconds().subquery()
    at_most = [func.coalesce(func.sum(case((seconds.c.seconds <= bound, 1), else_=0)), 0) for bound in bounds]
    count, total, *counts = session.execute(
        select(func.count(), func.coalesce(func.sum(seconds.c.seconds), 0.0), *at_most)
    ).one()
    return Recoveries(count=count, seconds=float(total), at_most=dict(zip(bounds, map(int, counts), strict=True)))


def _recovery_seconds() -> Select:
    """One row per recovery, its seconds. Of a job node's placed attempts by number, only those preempted or whose
    agent started matter: an agent start recovers from the one before it among those, if that one was preempted.
    By node: a gang launches again only its lost nodes, so the job's attempts by number interleave its nodes."""
    preempted = Attempt.end_reason == "preempted"
    in_order = {"partition_by": (Attempt.job_id, Attempt.node_rank), "order_by": Attempt.number}
    marks = select(
        Attempt.agent_started_at,
        func.lag(Attempt.end_reason).over(**in_order).label("before"),
        func.lag(func.coalesce(Attempt.notice_at, Attempt.ended_at)).over(**in_order).label("preempted_at"),
    ).where(PLACED, preempted | Attempt.agent_started_at.is_not(None)).subquery()
    waited = marks.c.agent_started_at - marks.c.preempted_at
    return select(case((waited < 0, 0.0), else_=waited).label("seconds")).where(
        marks.c.agent_started_at.is_not(None), marks.c.before == "preempted", marks.c.preempted_at.is_not(None),
    )


@dataclass(frozen=True)
class FleetBill:
    """The fleet's bill by how its jobs stand: a saving is a job's once it succeeds; one not ended saved so far, and
    one that ended without a result (`states.ended_without_result`) spent its dollars for nothing."""

    succeeded: JobBill
    unended: JobBill
    without_result: JobBill

    @property
    def total(self) -> JobBill:
        return _summed([self.succeeded, self.unended, self.without_result])


def fleet_bill(session: Session, now: float) -> JobBill:
    """Every placed attempt's bill summed (`ledger.bill`'s arithmetic), whatever its job's outcome."""
    return fleet_bill_by_outcome(session, now).total


def fleet_bill_by_outcome(session: Session, now: float) -> FleetBill:
    """Every placed attempt's bill summed by its job's outcome: billed seconds once ended, so far if not; those not
    priced left out, and counted (in the same scan: a store keeps every attempt)."""
    by_outcome: dict[str, list[JobBill]] = {"succeeded": [], "unended": [], "without_result": []}
    for state, *sums in session.execute(_bills_by_state(now)).all():
        by_outcome[_outcome(state)].append(_bill_of(*sums))
    return FleetBill(**{outcome: _summed(bills) for outcome, bills in by_outcome.items()})


def _outcome(state: str) -> str:
    if state == JobState.SUCCEEDED:
        return "succeeded"
    return "without_result" if ended_without_result(state) else "unended"


def _bills_by_state(now: float) -> Select:
    """One row per job state: its sums (`_bill_of`'s arguments). By the state, which `_outcome` then reads, so that
    which states saved nothing is written once (`states.ended_without_result`), not again in SQL."""
    held = _held_seconds(now)
    on_spot = Attempt.market == "spot"
    return select(
        Job.state,
        func.sum(_if_priced(case((on_spot, held), else_=0.0))),
        func.sum(_if_priced(case((on_spot, 0.0), else_=held))),
        func.sum(_if_priced(_cost_times_3600(held))),
        func.sum(_if_priced(_on_demand_seconds(held) * Attempt.on_demand_price_per_hour)),
        func.sum(case((PRICED, 0), else_=1)),
    ).join(Job, Job.id == Attempt.job_id).where(PLACED).group_by(Job.state)


def _bill_of(spot: float, on_demand: float, cost: float, baseline: float, unpriced: int) -> JobBill:
    return JobBill(
        spot_seconds=float(spot or 0.0), on_demand_seconds=float(on_demand or 0.0),
        cost=float(cost or 0.0) / 3600, on_demand_cost=float(baseline or 0.0) / 3600,
        unpriced_attempts=int(unpriced or 0),
    )


def _summed(bills: list[JobBill]) -> JobBill:
    def total(field: str) -> float:
        return sum((getattr(bill, field) for bill in bills), 0.0)

    return JobBill(total("spot_seconds"), total("on_demand_seconds"), total("cost"), total("on_demand_cost"),
                   sum(bill.unpriced_attempts for bill in bills))


def _if_priced(amount: ColumnElement[float]) -> ColumnElement[float]:
    """The amount of a priced attempt, 0 for another: a CASE computes only the branch taken, so an overflow in the
    other is never computed."""
    return case((PRICED, amount), else_=0.0)


def _cost_times_3600(held: ColumnElement[float]) -> ColumnElement[float]:
    """`ledger.attempt_cost` in SQL, in dollar-seconds per hour (summed, then divided once)."""
    charged = _charged_seconds(held)
    held_at_prices = case(
        (held < Attempt.earlier_price_seconds, Attempt.earlier_price_dollars * 3600 * held / Attempt.earlier_price_seconds),
        else_=Attempt.earlier_price_dollars * 3600 + (held - Attempt.earlier_price_seconds) * Attempt.price_per_hour,
    )
    return case(
        ((Attempt.earlier_price_seconds > 0) & (held > 0), held_at_prices * charged / held),
        else_=charged * Attempt.price_per_hour,
    )


def _on_demand_seconds(held: ColumnElement[float]) -> ColumnElement[float]:
    """`ledger.on_demand_seconds` in SQL."""
    charged = _charged_seconds(held)
    return case((charged > held, charged), else_=held)


def _charged_seconds(held: ColumnElement[float]) -> ColumnElement[float]:
    """`ledger.charged_seconds` in SQL."""
    return case(
        ((Attempt.ended_at.is_not(None)) & (Attempt.charged_seconds.is_not(None)), Attempt.charged_seconds),
        else_=held,
    )


def _held_seconds(now: float) -> ColumnElement[float]:
    """`ledger.held_seconds` in SQL, for placed attempts."""
    running_for = literal(now) - Attempt.started_at
    return case(
        (Attempt.ended_at.is_not(None), Attempt.billed_seconds),
        (running_for > 0, running_for),
        else_=0.0,
    )
