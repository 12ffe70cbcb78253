"""`spotrun market`: how the local cloud hands out and takes back spot capacity.

The commands import the local cloud themselves (numpy, psutil, its markets' models): this module is loaded at every
start of `spotrun`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional

import typer
from rich.markup import escape

from spotrun import config
from spotrun.cli.command_groups import CommandGroup
from spotrun.cli.consoles import CliConsole
from spotrun.cli.failing import bad_argument
from spotrun.pydantic_messages import error_message

if TYPE_CHECKING:
    from spotrun.providers.local import Market

app = typer.Typer(help="The local cloud's spot market (manual, random or a replayed real trace).", no_args_is_help=True,
                  cls=CommandGroup)
console = CliConsole()
Notice = Annotated[float, typer.Option(help="real seconds between a notice and the reclaim")]
# the market's fields as the options that set them, for error messages
OPTION_OF_FIELD = {"notice_seconds": "--notice", "mean_lifetime_seconds": "--mean-lifetime", "speed": "--speed",
                   "offset": "--offset"}


def _root() -> Path:
    return config.home() / "local-cloud"


@app.command()
def show() -> None:
    """The market the local cloud replays now."""
    from spotrun.providers.local import load_market

    typer.echo(json.dumps(load_market(_root()).model_dump(mode="json"), indent=2))


@app.command()
def manual(notice: Notice = 5.0) -> None:
    """Spot always available; preemptions only through `spotrun preempt`."""
    from spotrun.providers.local import ManualMarket

    _set(lambda: ManualMarket(notice_seconds=notice))
    console.print("local market: manual")


@app.command()
def random(
    mean_lifetime: Annotated[float, typer.Option(help="mean seconds a spot instance lives")],
    seed: int = 0,
    notice: Notice = 5.0,
) -> None:
    """Spot always available; each spot instance is reclaimed after an exponential lifetime."""
    from spotrun.providers.local import RandomMarket

    _set(lambda: RandomMarket(mean_lifetime_seconds=mean_lifetime, seed=seed, notice_seconds=notice))
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
    from spotrun.providers.local import trace_market

    traces = dict(_zone_pair(z) for z in zone) if zone else None
    market = _set(lambda: trace_market(traces, speed=speed, offset=offset, notice_seconds=notice,
                                       clock_starts_at_first_launch=at_first_launch))
    start = "at the first launch" if at_first_launch else "now"
    console.print(f"local market: trace replay at {speed:g}x from sample {offset}, starting {start}: "
                  + escape(", ".join(market.traces)))


def _set(build: Callable[[], Market]) -> Market:
    """Build the market and make it the local cloud's; a bad option is an error naming it, and the market in place
    is kept."""
    from pydantic import ValidationError

    from spotrun.providers.local import MarketError, set_market

    try:
        market = build()
    except ValidationError as invalid:
        _fail("; ".join(_option_problem(error) for error in invalid.errors()))
    except (MarketError, ValueError, OSError) as problem:
        _fail(str(problem))
    set_market(_root(), market)
    return market


def _option_problem(error) -> str:
    field = str(error["loc"][0]) if error["loc"] else ""
    return f"{OPTION_OF_FIELD.get(field, field)}: {error_message(error).lower()}, got {error['input']!r}"


def _fail(message: str) -> NoReturn:
    raise bad_argument(message)


def _zone_pair(text: str) -> tuple[str, str]:
    zone, sep, path = text.partition("=")
    if not sep or not zone or not path:
        _fail(f"--zone takes ZONE=TRACE.json, got {text!r}")
    return zone, path
