"""What a job file tells the simulator: the job's compute, deadline, restart overhead and prices, as the live
controller would plan it, so that `spotrun simulate --job FILE` compares the policies on the user's own job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spotrun.control.placement import job_prices
from spotrun.costs.catalog import UnknownPrice
from spotrun.policy.deadline import DEFAULT_RESTART_OVERHEAD
from spotrun.spec import JobSpec, Problem, SpecError, load_spec


@dataclass(frozen=True)
class JobNumbers:
    """A job file's numbers for the simulator; None where the file does not say."""

    compute_seconds: float | None
    deadline_seconds: float | None  # after the launch
    restart_overhead: float
    on_demand_price: float
    spot_price: float
    nodes: int = 1  # the simulator runs one node: its normalized costs are a gang's only if every node fares alike


def job_numbers(path: Path, now: float) -> JobNumbers:
    """Read the job file as `spotrun launch` does; an absolute deadline counts from `now`, as if launched now.
    Prices are the job's `resources.prices`, else the catalog's for its instance type (spot: in the first of the
    job's zones, or the catalog's reference price when it names none); the restart overhead is `spot.restart_overhead`, else what the live policy assumes
    until it has measured one."""
    spec = load_spec(path)
    deadline = spec.deadline_at(now)
    overhead = spec.spot.restart_overhead
    on_demand, spot = _prices(spec, str(path))
    return JobNumbers(
        compute_seconds=spec.estimated_duration,
        deadline_seconds=None if deadline is None else deadline - now,
        restart_overhead=DEFAULT_RESTART_OVERHEAD if overhead is None else overhead,
        on_demand_price=on_demand,
        spot_price=spot,
        nodes=spec.resources.nodes,
    )


def _prices(spec: JobSpec, source: str) -> tuple[float, float]:
    if spec.resources.instance_type is None and spec.resources.prices is None:
        raise SpecError(source, [Problem("resources.instance_type", "needed for its prices (or give resources.prices)")])
    zone = spec.spot.zones[0] if spec.spot.zones else None
    try:
        spot, on_demand = job_prices(spec, "spot", zone)
    except UnknownPrice as unknown:
        raise SpecError(source, [Problem("resources.instance_type", f"{unknown}; or give resources.prices")]) from None
    return on_demand, spot
