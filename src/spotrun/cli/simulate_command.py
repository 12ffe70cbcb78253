"""The `spotrun simulate` command: its options and their help. The sweep itself (`spotrun.cli.simulate`: numpy, the
policies, the simulator) is imported when the command runs, not at every start of `spotrun`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from spotrun.cli.job_files import job_file_path
from spotrun.sim.prices import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT


def simulate(
    trace: Annotated[
        Optional[list[Path]], typer.Option(help="trace file or folder of them (repeatable); default: the bundled traces")
    ] = None,
    multi_zone: Annotated[bool, typer.Option(help="all traces are zones of ONE market (else each trace is its own)")] = False,
    policy: Annotated[list[str], typer.Option(help="policy to run (repeatable), or 'all'")] = ["all"],  # noqa: B006
    job_file: Annotated[Optional[Path], typer.Option(
        "--job", help="a job file: C, D, d and the prices are its estimated_duration, spot.deadline (an absolute one "
                      "counted from now), spot.restart_overhead and resources' prices; an option given overrides. "
                      "Where its spot.use_spot / spot.fallback make its policy place it otherwise than the rows "
                      "assume (spot, on-demand as fallback), a row runs it as set", parser=job_file_path),
    ] = None,
    compute_hours: Annotated[Optional[float], typer.Option(
        help="C: hours of compute the job needs \\[default: 48]")] = None,
    deadline_hours: Annotated[Optional[float], typer.Option(
        help="D: hours from the start to the deadline \\[default: 52]")] = None,
    overhead_hours: Annotated[Optional[float], typer.Option(
        help="d: hours lost at each start or restart \\[default: 0.1]")] = None,
    on_demand_price: Annotated[Optional[float], typer.Option(
        help=f"$/h on-demand \\[default: {P3_2XLARGE_ON_DEMAND}, p3.2xlarge]")] = None,
    spot_price: Annotated[Optional[float], typer.Option(help=f"$/h spot \\[default: {P3_2XLARGE_SPOT}]")] = None,
    max_price: Annotated[Optional[float], typer.Option(
        help="$/h a spot launch bids at most: spot priced above it is refused, as live \\[default: the job file's "
             "spot.max_price, else the on-demand price]")] = None,
    zone_spot_price: Annotated[Optional[list[str]], typer.Option(
        help="ZONE=PRICE: $/h spot in that zone (a trace's file name without .json), where zones are priced apart "
             "as EC2 prices them (repeatable) \\[default: --spot-price in every zone]")] = None,
    bill_as: Annotated[Optional[str], typer.Option(
        help="charge each instance as this cloud does when it ends (aws: nothing for spot taken back within its "
             "first hour; aws, gcp, azure: a minute at least) \\[default: every step billed, the paper's model]")] = None,
    nodes: Annotated[Optional[int], typer.Option(
        help="nodes of a gang: spot is there while a trace counts that many instances, and costs are the gang's "
             "\\[default: the job file's resources.nodes, else 1]")] = None,
    every_hours: Annotated[float, typer.Option(help="hours between two start offsets along the traces")] = 6.0,
    observe: Annotated[str, typer.Option(help="'tick': policies see every zone each step (the paper's model); "
                                              "'launches': only what the live controller sees, moving make-before-break "
                                              "as it does; 'drain-first': that, but a move gives up the instance held "
                                              "before it launches the next")] = "tick",
    market_history_hours: Annotated[float, typer.Option(
        help="hours of each trace before a start that policies see first, as a platform that keeps watching its "
             "markets has them on record (0: none, the paper's setting; inf: all)")] = 0.0,
    fleet: Annotated[bool, typer.Option(
        "--fleet", help="run the jobs from every start offset of a market at once, sharing what each sees of spot, as "
                        "spotrun's controller hands a job the other jobs' tries (instead of each job alone)")] = False,
    by_market: Annotated[bool, typer.Option(
        "--by-market", help="also report each market (trace, or --multi-zone's one) on its own")] = False,
    bound: Annotated[bool, typer.Option(
        help="also run omniscient, the offline optimum that knows the whole trace, as the lower bound")] = True,
    processes: Annotated[Optional[int], typer.Option(min=1, help="worker processes (default: one per core)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Run policies from many start offsets along spot traces; report normalized cost, misses, preemptions."""
    from spotrun.cli.simulate import run

    run(
        trace=trace, multi_zone=multi_zone, policy=policy, job_file=job_file, compute_hours=compute_hours,
        deadline_hours=deadline_hours, overhead_hours=overhead_hours, on_demand_price=on_demand_price,
        spot_price=spot_price, max_price=max_price, zone_spot_price=zone_spot_price, bill_as=bill_as, nodes=nodes,
        every_hours=every_hours, observe=observe, market_history_hours=market_history_hours, fleet=fleet,
        by_market=by_market, bound=bound, processes=processes, as_json=as_json,
    )
