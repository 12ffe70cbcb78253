"""Prometheus metrics, computed from the store at each scrape (nothing is counted in memory, so a restart of the
server loses nothing and several servers on one store agree)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import select

from spotrun.control.states import JobState
from spotrun.costs.ledger import bill
from spotrun.state import Attempt, Job, Store

# Seconds from a preemption to the next attempt's agent reporting in.
RECOVERY_BUCKETS = (5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class StoreCollector(Collector):
    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        with self.store.session() as session:
            states = Counter(session.scalars(select(Job.state)))
            # refused tries (no instance) count for neither metric, and a long wait for spot makes thousands
            placed = select(Attempt).where(Attempt.started_at.is_not(None))
            attempts = list(session.scalars(placed.order_by(Attempt.job_id, Attempt.number)))
        yield _jobs_by_state(states)
        yield from _preemption_metrics(attempts)
        yield from _money_metrics(attempts, self.clock())


def _jobs_by_state(states: Counter[str]) -> Metric:
    family = GaugeMetricFamily("spotrun_jobs", "Jobs in the store, by state.", labels=["state"])
    for state in JobState:
        family.add_metric([state.value], states.get(state.value, 0))
    return family


def recovery_seconds(attempts: Iterable[Attempt]) -> tuple[int, list[float]]:
    """(preemptions, recovery times): for each preempted attempt followed by one whose agent started, the seconds
    from the preemption (its notice, else its end) to that agent start. Attempts come ordered by job and number."""
    preemptions, recoveries = 0, []
    preempted_at: float | None = None
    previous_job: int | None = None
    for attempt in attempts:
        if attempt.job_id != previous_job:
            preempted_at, previous_job = None, attempt.job_id
        if preempted_at is not None and attempt.agent_started_at is not None:
            recoveries.append(max(attempt.agent_started_at - preempted_at, 0.0))
            preempted_at = None
        if attempt.end_reason == "preempted":
            preemptions += 1
            preempted_at = attempt.notice_at or attempt.ended_at
    return preemptions, recoveries


def _preemption_metrics(attempts: list[Attempt]) -> Iterator[Metric]:
    preemptions, recoveries = recovery_seconds(attempts)
    yield CounterMetricFamily("spotrun_preemptions", "Attempts that ended because the cloud took the instance.",
                              value=preemptions)
    yield CounterMetricFamily("spotrun_recoveries", "Attempts whose agent started after a preemption.",
                              value=len(recoveries))
    yield HistogramMetricFamily(
        "spotrun_recovery_seconds", "Seconds from a preemption to the next attempt's agent starting.",
        buckets=_cumulative(recoveries), sum_value=sum(recoveries),
    )


def _cumulative(values: list[float]) -> list[tuple[str, float]]:
    buckets = [(str(bound), float(sum(v <= bound for v in values))) for bound in RECOVERY_BUCKETS]
    return [*buckets, ("+Inf", float(len(values)))]


def _money_metrics(attempts: list[Attempt], now: float) -> Iterator[Metric]:
    total = bill(attempts, now)
    yield CounterMetricFamily("spotrun_dollars_spent", "Dollars billed for all attempts so far.", value=total.cost)
    yield CounterMetricFamily(
        "spotrun_dollars_saved", "Dollars saved against running the same instance-seconds on-demand.", value=total.saved
    )


def store_registry(store: Store) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    return registry
