"""The local cloud: instances are processes on this machine, with spot markets replayed from traces."""

from spotrun.providers.local.market import (
    ZONES,
    ManualMarket,
    Market,
    MarketError,
    RandomMarket,
    TraceMarket,
    TraceWindow,
    find_preemption_window,
    load_market,
    parse_market,
    set_market,
    trace_market,
)
from spotrun.providers.local.provider import LocalProvider, UnknownInstance

__all__ = [
    "ZONES",
    "LocalProvider",
    "ManualMarket",
    "Market",
    "MarketError",
    "RandomMarket",
    "TraceMarket",
    "TraceWindow",
    "UnknownInstance",
    "find_preemption_window",
    "load_market",
    "parse_market",
    "set_market",
    "trace_market",
]
