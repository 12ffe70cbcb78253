"""`spotrun simulate`: compare placement policies on spot availability traces (the policy benchmark). The command's
options are `spotrun.cli.simulate_command`'s; this module, which loads numpy, the policies and the simulator, is
imported when it runs."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from spotrun.cli.consoles import CliConsole, print_whole
from spotrun.cli.failing import BAD_ARGUMENT, bad_argument, fail
from spotrun.costs.billing import CLOUD_RULES, BillingRule
from spotrun.policy import max_spot_price, policy_names
from spotrun.sim.engine import OBSERVE_MODES, SimJob
from spotrun.sim.market import Market
from spotrun.sim.prices import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT
from spotrun.sim.sweep import (
    OMNISCIENT, PolicySummary, RunRecord, checked_tasks, gaps_closed, summarize, summarize_by_market, sweep,
)
from spotrun.spec import SpecError
from spotrun.spec.errors import Problem
from spotrun.spec.fields import MAX_PRICE_PER_HOUR
from spotrun.spec.loader import located
from spotrun.traces import TraceError, bundled_traces_dir, list_traces, load_trace

if TYPE_CHECKING:
    from spotrun.cli.simulate_job import JobNumbers, LivePlacement

ALL_POLICIES = ("on_demand", "greedy", "uniform_progress", "default", OMNISCIENT)
HOUR = 3600.0

console = CliConsole()
errors = CliConsole(stderr=True)


def run(
    *, trace: list[Path] | None, multi_zone: bool, policy: list[str], job_file: Path | None,
    compute_hours: float | None, deadline_hours: float | None, overhead_hours: float | None,
    on_demand_price: float | None, spot_price: float | None, max_price: float | None, zone_spot_price: list[str] | None,
    bill_as: str | None, nodes: int | None, every_hours: float, observe: str, market_history_hours: float, fleet: bool,
    by_market: bool, bound: bool, processes: int | None, as_json: bool,
) -> None:
    """`spotrun simulate`, its options as `spotrun.cli.simulate_command` takes and tells them: run policies from many
    start offsets along spot traces; report normalized cost, misses, preemptions."""
    try:  # the options, the job file and the traces: what is wrong with them is a bad argument (exit 2)
        names = _policies(policy, bound)
        from_file = None
        if job_file is not None:
            from spotrun.cli.simulate_job import job_numbers  # checked as `launch` checks it: by the control plane

            from_file = job_numbers(job_file, time.time())
        numbers = _numbers(job_file, from_file, compute_hours=compute_hours, deadline_hours=deadline_hours,
                           overhead_hours=overhead_hours, on_demand_price=on_demand_price, spot_price=spot_price,
                           max_price=max_price, nodes=nodes)
        _check_options(every_hours=every_hours, **numbers)
        _check_sweep_options(observe, market_history_hours, fleet)
        markets = load_markets(trace or [bundled_traces_dir()], multi_zone, int(numbers["nodes"]))
        zone_prices = parse_zone_prices(zone_spot_price or [], markets)
        job = replace(_sim_job(numbers, zone_prices), billing=_billing(bill_as))
        live = from_file.placement if from_file is not None else None
        checked_tasks(markets, job, every_hours * HOUR, history_seconds=market_history_hours * HOUR, fleet=fleet)
    except SpecError as problem:
        errors.print("[red]invalid job file[/]")
        typer.echo(str(problem), err=True)
        raise typer.Exit(BAD_ARGUMENT) from None
    except (TraceError, ValueError, OSError) as problem:
        raise bad_argument(str(problem)) from None
    try:  # the sweep itself
        began = time.perf_counter()
        run_sweep = partial(sweep, markets, every_seconds=every_hours * HOUR, observe=observe, processes=processes,
                            history_seconds=market_history_hours * HOUR, fleet=fleet)
        with sweep_progress(errors) as on_progress:
            records = run_sweep(names, job, on_progress=on_progress)
        if live is not None and live.own_row is not None:
            records += as_row(run_sweep([live.policy], replace(job, settings=live.settings)), live.own_row)
            names = with_row(names, live.policy, live.own_row)
        elapsed = time.perf_counter() - began
    except (TraceError, ValueError, OSError) as problem:
        raise fail(str(problem)) from None
    summaries = summarize(records, names)
    per_market = summarize_by_market(records, names) if by_market else None
    sweep_settings = SweepSettings(every_hours, observe, market_history_hours, fleet)
    if as_json:
        typer.echo(_json_report(summaries, {**numbers, "zone_spot_prices": zone_prices, "bill_as": bill_as}, job_file, markets,
                                sweep_settings, elapsed, per_market, live))
    else:
        _print_report(summaries, numbers, job_file, markets, sweep_settings, elapsed, len(records), job, live)
        if per_market is not None:
            print_whole(console, by_market_table(per_market))


@contextmanager
def sweep_progress(terminal: Console) -> Iterator[Callable[[int, int], None] | None]:
    """A bar of the runs done, drawn on `terminal` while the sweep runs and erased after; none where `terminal` is not
    a terminal, so that logs and pipes get the report alone."""
    if not terminal.is_terminal:
        yield None
        return
    columns = (TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns, console=terminal, transient=True) as bar:
        runs = bar.add_task("runs", total=None)
        yield lambda done, total: bar.update(runs, completed=done, total=total)


@dataclass(frozen=True)
class SweepSettings:
    """How the runs were laid along the traces and what policies saw, as the report states it."""

    every_hours: float
    observe: str
    market_history_hours: float
    fleet: bool

    def as_json(self) -> dict[str, object]:
        history = self.market_history_hours
        # JSON has no infinity: all the history reads "inf", as the option takes it
        return {"every_hours": self.every_hours, "observe": self.observe,
                "market_history_hours": "inf" if math.isinf(history) else history, "fleet": self.fleet}

    def described(self) -> str:
        hours = self.market_history_hours
        history = "" if hours <= 0 else (", market history: all before each start" if math.isinf(hours)
                                         else f", market history: {hours:g} h")
        return (f"starts every {self.every_hours:g} h, observe={self.observe}" + history
                + (", jobs run at once and share what they see" if self.fleet else ""))


def as_row(records: list[RunRecord], row: str) -> list[RunRecord]:
    """The records, reported as the row named `row`."""
    return [replace(record, policy=row) for record in records]


def with_row(names: list[str], after: str, row: str) -> list[str]:
    """The report's rows with `row` after the policy `after` (before the bound where that policy was not run)."""
    at = names.index(after) + 1 if after in names else names.index(OMNISCIENT) if OMNISCIENT in names else len(names)
    return [*names[:at], row, *names[at:]]


def _sim_job(numbers: dict[str, float], zone_prices: dict[str, float] | None = None) -> SimJob:
    """The simulated job in seconds, priced for the whole gang."""
    gang, cap = int(numbers["nodes"]), numbers["max_price"]
    return SimJob(numbers["compute_hours"] * HOUR, numbers["deadline_hours"] * HOUR, numbers["overhead_hours"] * HOUR,
                  gang * numbers["on_demand_price"], gang * numbers["spot_price"], None if cap is None else gang * cap,
                  zone_spot_prices=tuple((zone, gang * price) for zone, price in (zone_prices or {}).items()))


def _billing(cloud: str | None) -> BillingRule | None:
    if cloud is None:
        return None
    if cloud not in CLOUD_RULES or cloud == "local":
        raise ValueError(f"--bill-as must be one of aws, azure, gcp, got {cloud!r}")
    return CLOUD_RULES[cloud]


def parse_zone_prices(given: list[str], markets: list[tuple[str, Market]]) -> dict[str, float]:
    """--zone-spot-price ZONE=PRICE options as {zone: $/h}, each zone one of the markets'."""
    zones = {zone for _, market in markets for zone in market.zones}
    prices: dict[str, float] = {}
    for item in given:
        try:
            zone, price = parse_zone_price(item)
        except ValueError as problem:
            raise ValueError(f"--zone-spot-price {item!r}: {problem}, e.g. {min(zones)}=0.92") from None
        if zone not in zones:
            raise ValueError(f"--zone-spot-price {item!r}: no zone {zone!r} in the traces; zones: {', '.join(sorted(zones))}")
        prices[zone] = price
    return prices


def parse_zone_price(item: str) -> tuple[str, float]:
    """One ZONE=PRICE as (zone, $/h); a ValueError that says what is expected where it is not that."""
    zone, sep, text = item.partition("=")
    try:
        price = float(text) if sep else math.nan
    except ValueError:
        price = math.nan
    if not zone or not 0 < price <= MAX_PRICE_PER_HOUR:
        raise ValueError(f"expected ZONE=PRICE with a positive $/h up to {MAX_PRICE_PER_HOUR:,.0f}")
    return zone, price


def _check_sweep_options(observe: str, market_history_hours: float, fleet: bool) -> None:
    if observe not in OBSERVE_MODES:
        raise ValueError(f"--observe must be one of {', '.join(OBSERVE_MODES)}, got {observe!r}")
    if not market_history_hours >= 0:
        raise ValueError(f"--market-history-hours must be 0 or more (inf: all), got {market_history_hours}")
    if fleet and market_history_hours > 0:
        raise ValueError("--fleet and --market-history-hours both give jobs a market history (what earlier jobs "
                         "saw, or the trace itself): pick one")


def _json_report(
    summaries: list[PolicySummary], numbers: dict[str, float], job_file: Path | None,
    markets: list[tuple[str, Market]], settings: SweepSettings, elapsed: float,
    per_market: dict[str, list[PolicySummary]] | None = None, live: LivePlacement | None = None,
) -> str:
    report = {
        "job": {**numbers, "file": str(job_file) if job_file else None,
                "live": live.as_json() if live else None},
        "markets": [label for label, _ in markets], **settings.as_json(),
        "seconds": round(elapsed, 2),
        "policies": _json_summaries(summaries),
    }
    if per_market is not None:
        report["by_market"] = [{"market": label, "policies": _json_summaries(mine)} for label, mine in per_market.items()]
    return json.dumps(report, indent=2, allow_nan=False)


def _json_summaries(summaries: list[PolicySummary]) -> list[dict[str, object]]:
    closed = gaps_closed(summaries)
    return [{**s.as_dict(), "gap_closed": _json_number(closed.get(s.policy))} for s in summaries]


def _print_report(
    summaries: list[PolicySummary], numbers: dict[str, float], job_file: Path | None,
    markets: list[tuple[str, Market]], settings: SweepSettings, elapsed: float, runs: int, job: SimJob,
    live: LivePlacement | None,
) -> None:
    closed = gaps_closed(summaries)
    gang = int(numbers["nodes"])
    title = ((f"{escape(job_file.name)}: " if job_file else "")
             + f"C={numbers['compute_hours']:g} h, D={numbers['deadline_hours']:g} h, "
             f"d={numbers['overhead_hours']:g} h" + (f", {gang} nodes" if gang > 1 else "") + "; "
             f"{len(markets)} market(s), {settings.described()}"
             + ("" if job.billing is None else f"; each instance charged as {job.billing.name} charges"))
    print_whole(console, summary_table(summaries, title, closed))
    if live is not None:
        console.print(live.note())
    if warning := _priced_out_warning(job, numbers, markets):
        console.print(f"[yellow]{escape(warning)}[/]")
    console.print(f"{runs} runs in {elapsed:.1f} s; cost normalized to the whole job on on-demand "
                  f"(${job.on_demand_cost:,.2f}" + (f" for {gang} nodes" if gang > 1 else "") + "); "
                  "> on-demand: the share of runs that cost more than on-demand from the start"
                  + ("; gap closed: the share of the uniform_progress → omniscient gap in mean cost" if closed else "")
                  + ("; '-' where a policy missed deadlines" if closed and any(s.misses for s in summaries) else ""))


def _priced_out_warning(job: SimJob, numbers: dict[str, float], markets: list[tuple[str, Market]]) -> str | None:
    """What the report says where spot costs more than the max price: in every zone, or in some."""
    zones = sorted({zone for _, market in markets for zone in market.zones})
    priced_out = [zone for zone in zones if not job.spot_within_max_price_in(zone)]
    if not priced_out:
        return None
    cap = f"${max_spot_price(numbers['on_demand_price'], numbers['max_price']):g}/h"
    if len(priced_out) == len(zones) and not job.zone_spot_prices:
        return (f"spot (${numbers['spot_price']:g}/h) costs more than the max price ({cap}): every spot launch is "
                "refused, so every policy ran on on-demand")
    if len(priced_out) == len(zones):
        return f"spot costs more than the max price ({cap}) in every zone, so every policy ran on on-demand"
    return f"spot costs more than the max price ({cap}) in {', '.join(priced_out)}: no policy ran spot there"


def _json_number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(value, 4)


PAPER_JOB = {"compute_hours": 48.0, "deadline_hours": 52.0, "overhead_hours": 0.1,
             "on_demand_price": P3_2XLARGE_ON_DEMAND, "spot_price": P3_2XLARGE_SPOT, "max_price": None, "nodes": 1}
JOB_FIELD_OF = {"compute_hours": "estimated_duration", "deadline_hours": "spot.deadline"}  # those it must give
# where in a job file each number comes from (a price may come from the catalog instead, which gives none out of bounds)
FIELD_IN_FILE = {**JOB_FIELD_OF, "overhead_hours": "spot.restart_overhead", "nodes": "resources.nodes",
                 "on_demand_price": "resources.prices.on_demand", "spot_price": "resources.prices.spot",
                 "max_price": "spot.max_price"}


def _numbers(job_file: Path | None, from_file: JobNumbers | None, **given: float | None) -> dict[str, float | None]:
    """The job's numbers: each option given, else the job file's, else (with no job file) the paper's job; the max
    price None where neither gives it (the on-demand price). One the job file gives that no run could use is a
    SpecError naming its field there."""
    if from_file is None:
        return {name: PAPER_JOB[name] if value is None else value for name, value in given.items()}
    in_file = asdict(from_file)
    numbers = {name: in_file[name] if value is None else value for name, value in given.items()}
    for name, value in numbers.items():
        if value is None and name in JOB_FIELD_OF:
            option = "--" + name.replace("_", "-")
            raise ValueError(f"{job_file} gives no {JOB_FIELD_OF[name]}: add it there or pass {option}")
    past = in_file["deadline_hours"]
    if given.get("deadline_hours") is None and past is not None and past <= 0:  # a moment already gone
        before = f"; it is {-past:,.1f} h before it" if past < 0 else ""
        problem = Problem("spot.deadline", f"must be after now (an absolute deadline counts from now, as if launched "
                                           f"now){before}: give a later one or pass --deadline-hours")
        raise located(SpecError(str(job_file), [problem]), from_file.text)
    taken = {name: value for name, value in numbers.items() if given[name] is None}
    if problems := [Problem(FIELD_IN_FILE[name], problem) for name, problem in _number_problems(taken)]:
        raise located(SpecError(str(job_file), problems), from_file.text)
    return numbers


def _check_options(**numbers: float | None) -> None:
    """Refuse numbers no run could use, naming the option as the user typed it."""
    if problems := _number_problems(numbers):
        name, problem = problems[0]
        raise ValueError(f"--{name.replace('_', '-')} {problem}")


def _number_problems(numbers: dict[str, float | None]) -> list[tuple[str, str]]:
    """(name, what is wrong) for each of the job's `numbers` no run could use: a price past any instance's, a
    negative restart overhead, any other not positive (no max price, None, is the on-demand price)."""
    problems = []
    for name, value in numbers.items():
        if value is None and name == "max_price":
            continue
        if name == "overhead_hours":
            if not (value >= 0 and math.isfinite(value)):
                problems.append((name, f"must be 0 or more, got {value:g}"))
        elif not (value > 0 and math.isfinite(value)):
            problems.append((name, f"must be a positive number, got {value:g}"))
        elif name.endswith("price") and value > MAX_PRICE_PER_HOUR:
            problems.append((name, f"must be at most {MAX_PRICE_PER_HOUR:,.0f} $/h, got {value:g}"))
    return problems


def _policies(requested: list[str], bound: bool) -> list[str]:
    """The policies asked for ("all": every one) and omniscient as the lower bound, unless `bound` is off (then only
    when named)."""
    if "all" in requested:
        return [name for name in ALL_POLICIES if bound or name != OMNISCIENT]
    known = set(policy_names()) | {OMNISCIENT}
    for name in requested:
        if name not in known:
            raise ValueError(f"--policy: unknown policy {name!r}; known: all, {', '.join(sorted(known))}")
    names = list(dict.fromkeys(requested))
    return names + [OMNISCIENT] if bound and OMNISCIENT not in names else names


def load_markets(paths: list[Path], multi_zone: bool, nodes: int = 1) -> list[tuple[str, Market]]:
    """One market per trace file, or (multi_zone) one market with every trace as a zone named by its file; spot is
    there while a trace counts `nodes` instances."""
    files = [f for path in paths for f in (list_traces(path) if Path(path).is_dir() else [Path(path)])]
    if not files:
        raise ValueError(f"no trace files (*.json) in {', '.join(map(str, paths))}")
    traces = {f.stem: load_trace(f) for f in files}
    if nodes > 1:
        for f in files:
            if traces[f.stem].data.max(initial=0) <= 1:
                raise ValueError(
                    f"{f} counts at most one instance, so it cannot tell when a gang of {nodes} could run: pass "
                    "traces that count instances (such as availability/16-node) or --nodes 1"
                )
    if multi_zone:
        return [("+".join(traces), Market.from_traces(traces, nodes))]
    return [(name, Market.from_traces({name: t}, nodes)) for name, t in traces.items()]


SUMMARY_COLUMNS = (
    "policy", "runs", "mean", "median", "p90", "worst", "> on-demand", "misses", "preemptions", "switches", "moves",
)


def summary_table(summaries: list[PolicySummary], title: str, closed: dict[str, float] | None = None) -> Table:
    """One row per policy; a "gap closed" column when uniform_progress and omniscient both ran (`closed`)."""
    table = _table(title, SUMMARY_COLUMNS + (("gap closed",) if closed else ()))
    for s in summaries:
        table.add_row(*_summary_cells(s, closed))
    return table


def by_market_table(per_market: dict[str, list[PolicySummary]]) -> Table:
    """Each market's rows, a section each, with its own gap closed where uniform_progress and omniscient ran."""
    gaps = {label: gaps_closed(mine) for label, mine in per_market.items()}
    table = _table("by market", ("market",) + SUMMARY_COLUMNS + (("gap closed",) if any(gaps.values()) else ()))
    for label, mine in per_market.items():
        for i, s in enumerate(mine):
            table.add_row(escape(label) if i == 0 else "", *_summary_cells(s, gaps[label] or None),
                          end_section=i == len(mine) - 1)
    return table


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in ("market", "policy") else "right", no_wrap=True)
    return table


def _summary_cells(s: PolicySummary, closed: dict[str, float] | None) -> list[str]:
    cells = [
        s.policy, str(s.runs), f"{s.mean:.3f}", f"{s.median:.3f}", f"{s.p90:.3f}", f"{s.worst:.3f}",
        f"{s.dearer_than_on_demand:.1%}",
        f"[red]{s.misses}[/]" if s.misses else "0", f"{s.preemptions:.1f}", f"{s.switches:.1f}", f"{s.moves:.1f}",
    ]
    if closed:
        share = closed[s.policy]
        cells.append("-" if math.isnan(share) else f"{share:.0%}")
    return cells
