"""What a job file tells the simulator: the job's compute, deadline, restart overhead and prices, as the live
controller would plan it, so that `spotrun simulate --job FILE` compares the policies on the user's own job."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from spotrun.control.jobs import check_resources
from spotrun.control.placement import job_prices
from spotrun.costs.catalog import UnknownPrice
from spotrun.policy import markets_regardless
from spotrun.policy.deadline import DEFAULT_RESTART_OVERHEAD
from spotrun.sim.engine import SpotSettings
from spotrun.spec import JobSpec, Problem, SpecError, load_job_file, located

HOUR = 3600.0


@dataclass(frozen=True)
class LivePlacement:
    """How the live controller places the job file's job: its policy and its spot settings."""

    policy: str
    settings: SpotSettings

    @property
    def own_row(self) -> str | None:
        """The name of a row that runs the job's policy with the job's own spot settings, where they make it place
        the job otherwise than the policy rows assume (spot, on-demand as the fallback); None where its row already
        shows how the job is placed (a policy that chooses its markets itself refuses settings it would break)."""
        if self.settings.as_assumed or markets_regardless(self.policy):
            return None
        return f"{self.policy} ({'use_spot: false' if not self.settings.use_spot else 'fallback: wait'})"

    def as_json(self) -> dict[str, object]:
        return {"policy": self.policy, **asdict(self.settings), "row": self.own_row}

    def note(self) -> str:
        """What a report of the simulated policies should say of the job's own placement."""
        said = f"live, this job is placed by policy {self.policy!r}"
        shown = f": row '{self.own_row}'" if self.own_row else ""
        if not self.settings.use_spot:
            return (said + " on on-demand only (spot.use_spot: false)" + (shown or ", at on_demand's cost")
                    + "; the other rows show what spot would cost it")
        if self.settings.fallback == "wait":
            return (said + " on spot only (spot.fallback: wait), waiting for spot without planning for the deadline"
                    + shown + "; the other rows may use on-demand")
        return said


@dataclass(frozen=True)
class JobNumbers:
    """A job file's numbers for the simulator, named as `spotrun simulate`'s options (None where the file does not
    say), and how the job is placed live."""

    compute_hours: float | None
    deadline_hours: float | None  # after the launch
    overhead_hours: float
    on_demand_price: float  # $/h of one node
    spot_price: float
    max_price: float | None  # None: the on-demand price
    nodes: int
    placement: LivePlacement
    text: str  # the job file as read, once (a named pipe is read once), to locate the problems found later


def job_numbers(path: Path, now: float) -> JobNumbers:
    """The job file's numbers (prices per node), the file read and checked as `spotrun launch` does.

    An absolute deadline counts from `now`, as if launched now. Prices are the job's `resources.prices`, else the
    catalog's for its instance type (spot: in the first of the job's zones, or the catalog's reference price when it
    names none). The restart overhead is `spot.restart_overhead`, else what the live policy assumes until it has
    measured one."""
    spec, text = load_job_file(path)
    try:
        spot, on_demand = _checked_prices(spec, str(path))
    except SpecError as error:
        raise located(error, text) from None
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
        placement=LivePlacement(spec.spot.policy, SpotSettings(
            spec.spot.use_spot, spec.spot.fallback, spec.spot.preemptions_before_fallback, spec.spot.fallback_window,
        )),
        text=text,
    )


def _checked_prices(spec: JobSpec, source: str) -> tuple[float, float]:
    """(spot, on-demand) $/h of one node; SpecError where the job could not be placed or priced, as at a launch."""
    check_resources(spec, source)
    zone = spec.spot.zones[0] if spec.spot.zones else None
    try:
        return job_prices(spec, "spot", zone)
    except UnknownPrice as unknown:
        raise SpecError(source, [Problem("spot.zones", f"{unknown}; or give resources.prices")]) from None
