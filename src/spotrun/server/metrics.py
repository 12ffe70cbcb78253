"""Prometheus metrics, computed from the store at each scrape (nothing is counted in memory, so a restart of the
server loses nothing and several servers on one store agree). The database sums them (`fleet_totals`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from spotrun.control.states import JobState
from spotrun.costs.ledger import MAX_PRICE_PER_HOUR
from spotrun.server import fleet_totals
from spotrun.state import Store

# Seconds from a preemption to the next attempt's agent reporting in.
RECOVERY_BUCKETS = (5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class StoreCollector(Collector):
    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        with self.store.session() as session:
            states = fleet_totals.jobs_by_state(session)
            preemptions = fleet_totals.preemptions(session)
            recoveries = fleet_totals.recoveries(session, RECOVERY_BUCKETS)
            dollars = fleet_totals.fleet_bill_by_outcome(session, self.clock())
            warnings = fleet_totals.early_warnings(session)
        yield _jobs_by_state(states)
        yield CounterMetricFamily("spotrun_preemptions", "Attempts that ended because the cloud took the instance.",
                                  value=preemptions)
        yield CounterMetricFamily("spotrun_recoveries", "Attempts whose agent started after a preemption.",
                                  value=recoveries.count)
        yield _recovery_histogram(recoveries)
        yield _early_warnings(warnings)
        yield from _dollars(dollars)


def _dollars(bill: fleet_totals.FleetBill) -> Iterator[Metric]:
    # Gauges, not counters: a bill can fall (an instance left for the cloud to take back is charged its seconds until
    # the cloud takes it in its free first hour), a saving can be negative, and a job's dollars move from one gauge
    # to another when it ends.
    yield GaugeMetricFamily("spotrun_dollars_spent", "Dollars billed for all attempts so far, of every job whatever "
                            "its outcome.", value=bill.total.cost)
    yield GaugeMetricFamily(
        "spotrun_dollars_saved", "Dollars saved by the jobs that succeeded: what the same instance-seconds would have "
        "cost on-demand, less what they cost. Jobs not ended are in spotrun_dollars_saved_so_far; failed and "
        "cancelled ones saved nothing (spotrun_dollars_spent_without_result).", value=bill.succeeded.saved,
    )
    yield GaugeMetricFamily(
        "spotrun_dollars_saved_so_far", "Dollars saved so far by the jobs not ended, against the same "
        "instance-seconds on-demand: provisional, moved to spotrun_dollars_saved if the job succeeds; if it fails or "
        "is cancelled it saved nothing and its dollars count in spotrun_dollars_spent_without_result.",
        value=bill.unended.saved,
    )
    yield GaugeMetricFamily(
        "spotrun_dollars_spent_without_result", "Dollars billed for the jobs that ended without a result (failed, "
        "cancelled): part of spotrun_dollars_spent, counted in no saving.", value=bill.without_result.cost,
    )
    yield GaugeMetricFamily(
        "spotrun_unpriced_attempts", "Attempts left out of every spotrun_dollars_* gauge: stored at over "
        f"{MAX_PRICE_PER_HOUR:,.0f} $/h, a price no instance has (jobs stored before prices were capped), whose "
        "dollars would make the sums infinite.", value=bill.total.unpriced_attempts,
    )


def _jobs_by_state(states: dict[str, int]) -> Metric:
    family = GaugeMetricFamily("spotrun_jobs", "Jobs in the store, by state.", labels=["state"])
    for state in JobState:
        family.add_metric([state.value], states.get(state.value, 0))
    return family


def _early_warnings(warnings: dict[tuple[str, str], int]) -> Metric:
    # A gauge, as jobs by state: an attempt that ends leaves "running", and a counter that falls reads as a reset.
    family = GaugeMetricFamily(
        "spotrun_early_warnings", "Attempts whose agent reported an early warning (not a preemption notice), by the "
        "warning and how the attempt ended (running: not yet).", labels=["warning", "end"],
    )
    for (warning, end), count in sorted(warnings.items()):
        family.add_metric([warning, end], count)
    return family


def _recovery_histogram(recoveries: fleet_totals.Recoveries) -> Metric:
    buckets = [(str(bound), float(recoveries.at_most[bound])) for bound in RECOVERY_BUCKETS]
    return HistogramMetricFamily(
        "spotrun_recovery_seconds", "Seconds from a preemption to the next attempt's agent starting.",
        buckets=[*buckets, ("+Inf", float(recoveries.count))], sum_value=recoveries.seconds,
    )


def store_registry(store: Store) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    return registry
