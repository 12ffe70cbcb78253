"""`spotrun market`: how the local cloud hands out and takes back spot capacity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from spotrun import config
from spotrun.providers.local import ManualMarket, MarketError, RandomMarket, load_market, set_market, trace_market

app = typer.Typer(help="The local cloud's spot market (manual, random or a replayed real trace).", no_args_is_help=True)
console = Console()
Notice = Annotated[float, typer.Option(help="real seconds between a notice and the reclaim")]


def _root() -> Path:
    return config.home() / "local-cloud"


@app.command()
def show() -> None:
    """The market the local cloud replays now."""
    typer.echo(json.dumps(load_market(_root()).model_dump(mode="json"), indent=2))


@app.command()
def manual(notice: Notice = 5.0) -> None:
    """Spot always available; preemptions only through `spotrun preempt`."""
    set_market(_root(), ManualMarket(notice_seconds=notice))
    console.print("local market: manual")


@app.command()
def random(
    mean_lifetime: Annotated[float, typer.Option(help="mean seconds a spot instance lives")],
    seed: int = 0,
    notice: Notice = 5.0,
) -> None:
    """Spot always available; each spot instance is reclaimed after an exponential lifetime."""
    set_market(_root(), RandomMarket(mean_lifetime_seconds=mean_lifetime, seed=seed, notice_seconds=notice))
    console.print(f"local market: random, mean spot lifetime {mean_lifetime:.0f} s")


@app.command()
def trace(
    zone: Annotated[Optional[list[str]], typer.Option(help="ZONE=TRACE.json (repeatable); default: bundled traces")] = None,
    speed: Annotated[float, typer.Option(help="trace seconds per real second (600: one 10-minute sample a second)")] = 600.0,
    offset: Annotated[int, typer.Option(help="the trace sample to start at")] = 0,
    notice: Notice = 5.0,
    at_first_launch: Annotated[
        bool, typer.Option("--at-first-launch", help="start the replay at the first launch request, not now")
    ] = False,
) -> None:
    """Replay real spot availability traces, one per zone, with time scaled."""
    try:
        traces = dict(_zone_pair(z) for z in zone) if zone else None
        market = trace_market(traces, speed=speed, offset=offset, notice_seconds=notice,
                              clock_starts_at_first_launch=at_first_launch)
    except (MarketError, ValueError, OSError) as problem:
        Console(stderr=True).print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None
    set_market(_root(), market)
    start = "at the first launch" if at_first_launch else "now"
    console.print(f"local market: trace replay at {speed:g}x from sample {offset}, starting {start}: "
                  + ", ".join(market.traces))


def _zone_pair(text: str) -> tuple[str, str]:
    zone, sep, path = text.partition("=")
    if not sep or not zone or not path:
        raise ValueError(f"--zone takes ZONE=TRACE.json, got {text!r}")
    return zone, path
