"""What a job file tells the simulator: the job's compute, deadline, restart overhead and prices, as the live
controller would plan it, so that `spotrun simulate --job FILE` compares the policies on the user's own job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spotrun.control.jobs import check_resources
from spotrun.control.placement import job_prices
from spotrun.costs.catalog import UnknownPrice
from spotrun.policy.deadline import DEFAULT_RESTART_OVERHEAD
from spotrun.spec import Problem, SpecError, load_spec

HOUR = 3600.0


@dataclass(frozen=True)
class JobNumbers:
    """A job file's numbers for the simulator, named as `spotrun simulate`'s options; None where the file does not
    say."""

    compute_hours: float | None
    deadline_hours: float | None  # after the launch
    overhead_hours: float
    on_demand_price: float  # $/h of one node
    spot_price: float
    max_price: float | None  # None: the on-demand price
    nodes: int


def job_numbers(path: Path, now: float) -> JobNumbers:
    """The job file's numbers (prices per node), the file read and checked as `spotrun launch` does.

    An absolute deadline counts from `now`, as if launched now. Prices are the job's `resources.prices`, else the
    catalog's for its instance type (spot: in the first of the job's zones, or the catalog's reference price when it
    names none). The restart overhead is `spot.restart_overhead`, else what the live policy assumes until it has
    measured one."""
    spec = load_spec(path)
    check_resources(spec, str(path))
    zone = spec.spot.zones[0] if spec.spot.zones else None
    try:
        spot, on_demand = job_prices(spec, "spot", zone)
    except UnknownPrice as unknown:
        raise SpecError(str(path), [Problem("spot.zones", f"{unknown}; or give resources.prices")]) from None
    deadline = spec.deadline_at(now)
    overhead = spec.spot.restart_overhead
    return JobNumbers(
        compute_hours=None if spec.estimated_duration is None else spec.estimated_duration / HOUR,
        deadline_hours=None if deadline is None else (deadline - now) / HOUR,
        overhead_hours=(DEFAULT_RESTART_OVERHEAD if overhead is None else overhead) / HOUR,
        on_demand_price=on_demand,
        spot_price=spot,
        max_price=spec.spot.max_price,
        nodes=spec.resources.nodes,
    )
