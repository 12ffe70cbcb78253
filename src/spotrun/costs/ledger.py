"""Per-attempt bills and the job's savings report."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol

from spotrun.limits import MAX_PRICE_PER_HOUR

# A job stored before prices were capped may hold one no instance has (1e308 $/h): its attempts' bills overflow to inf,
# and their savings to NaN, which no report can show and no JSON can carry. Such an attempt is left out of every bill
# and counted (`JobBill.unpriced_attempts`); `priced` tells which. The cap per second tests the dollars of the seconds
# held before a spot price moved.
MAX_PRICE_PER_SECOND = MAX_PRICE_PER_HOUR / 3600


class BillableAttempt(Protocol):
    market: str
    price_per_hour: float
    on_demand_price_per_hour: float
    started_at: float | None
    ended_at: float | None
    billed_seconds: float
    charged_seconds: float | None
    earlier_price_seconds: float  # held at prices before `price_per_hour` (a spot price that moved), and ...
    earlier_price_dollars: float  # ... what those seconds cost


@dataclass(frozen=True)
class JobBill:
    spot_seconds: float
    on_demand_seconds: float
    cost: float  # what the clouds charge: a spot instance they took back in its first hour can be free (AWS)
    on_demand_cost: float  # the same instance-seconds held, all on-demand (`on_demand_seconds`)
    unpriced_attempts: int = 0  # left out of all the above: their stored prices are over the cap (`priced`)

    @property
    def seconds(self) -> float:
        return self.spot_seconds + self.on_demand_seconds

    @property
    def saved(self) -> float:
        return self.on_demand_cost - self.cost

    @property
    def saved_fraction(self) -> float:
        return self.saved / self.on_demand_cost if self.on_demand_cost > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": self.seconds, "saved": self.saved, "saved_fraction": self.saved_fraction}


def priced(attempt: BillableAttempt) -> bool:
    """Whether the attempt's stored prices are ones an instance can have (at most `MAX_PRICE_PER_HOUR`, those of its
    seconds before a spot price move included), so that its bill is a finite number of dollars."""
    return (
        attempt.price_per_hour <= MAX_PRICE_PER_HOUR and attempt.on_demand_price_per_hour <= MAX_PRICE_PER_HOUR
        and attempt.earlier_price_dollars <= attempt.earlier_price_seconds * MAX_PRICE_PER_SECOND
    )


def held_seconds(attempt: BillableAttempt, now: float) -> float:
    """Seconds the attempt held an instance: billed when ended, so far when still running."""
    if attempt.started_at is None:
        return 0.0
    if attempt.ended_at is not None:
        return attempt.billed_seconds
    return max(now - attempt.started_at, 0.0)


def charged_seconds(attempt: BillableAttempt, now: float) -> float:
    """Seconds the cloud charges for: its rule applied once ended (`costs.billing`), the seconds so far if not."""
    if attempt.ended_at is not None and attempt.charged_seconds is not None:
        return attempt.charged_seconds
    return held_seconds(attempt, now)


def held_dollars(attempt: BillableAttempt, now: float) -> float:
    """The seconds held, each at the price of its time: those before the spot price last moved as recorded, the rest
    at `price_per_hour`. An instance that ended before the move was recorded (the cloud took it while it could not
    be asked) held only a share of those seconds, at their mean price."""
    held = held_seconds(attempt, now)
    if held < attempt.earlier_price_seconds:
        return attempt.earlier_price_dollars * held / attempt.earlier_price_seconds
    return attempt.earlier_price_dollars + (held - attempt.earlier_price_seconds) / 3600 * attempt.price_per_hour


def attempt_cost(attempt: BillableAttempt, now: float) -> float:
    """The seconds charged at the prices of the seconds held: the cloud's rule scales the attempt's mean price."""
    charged = charged_seconds(attempt, now)
    held = held_seconds(attempt, now)
    if not attempt.earlier_price_seconds or held <= 0:
        return charged / 3600 * attempt.price_per_hour
    return held_dollars(attempt, now) * charged / held


def on_demand_seconds(attempt: BillableAttempt, now: float) -> float:
    """The seconds an on-demand instance held as long would be charged: the cloud's minimum counts there too (an
    on-demand attempt of 6 s, charged 60, reported a saving of -900% against 6 s at the on-demand price). A spot
    instance the cloud took back free counts its seconds held."""
    return max(held_seconds(attempt, now), charged_seconds(attempt, now))


def bill(attempts: Iterable[BillableAttempt], now: float) -> JobBill:
    """The attempts' bills summed; those not `priced` left out, and counted."""
    spot = on_demand = cost = baseline = 0.0
    unpriced = 0
    for attempt in attempts:
        if not priced(attempt):
            unpriced += 1
            continue
        seconds = held_seconds(attempt, now)
        if attempt.market == "spot":
            spot += seconds
        else:
            on_demand += seconds
        cost += attempt_cost(attempt, now)
        baseline += on_demand_seconds(attempt, now) / 3600 * attempt.on_demand_price_per_hour
    return JobBill(spot_seconds=spot, on_demand_seconds=on_demand, cost=cost, on_demand_cost=baseline,
                   unpriced_attempts=unpriced)


def format_bill(bill: JobBill, *, ended_without_result: bool = False) -> str:
    """e.g. "ran 2,423 s (1,900 s spot, 523 s on-demand): $0.96; on-demand only: $2.06; saved 53%". The parts are
    rounded so that they add up to the whole (13.6 s and 26.6 s read "40 s (14 s spot, 26 s on-demand)").

    A job that ended without a result (failed, cancelled) saved nothing, whatever spot's discount: its line says what
    it spent and what the same hours would have cost on-demand ("...: $0.96 spent without a result; on-demand for the
    same hours: $2.06")."""
    whole, spot = round(bill.seconds), round(bill.spot_seconds)
    ran = f"ran {whole:,} s ({spot:,} s spot, {whole - spot:,} s on-demand): "
    if ended_without_result:
        line = (f"{ran}{format_dollars(bill.cost)} spent without a result; "
                f"on-demand for the same hours: {format_dollars(bill.on_demand_cost)}")
    else:
        line = (f"{ran}{format_dollars(bill.cost)}; on-demand only: {format_dollars(bill.on_demand_cost)}; "
                f"saved {bill.saved_fraction:.0%}")
    return line + unpriced_note(bill.unpriced_attempts)


def unpriced_note(unpriced_attempts: int) -> str:
    """What a bill leaves out (`priced`), or nothing."""
    if not unpriced_attempts:
        return ""
    attempts = "1 attempt" if unpriced_attempts == 1 else f"{unpriced_attempts:,} attempts"
    return f"; {attempts} left out: stored at over {MAX_PRICE_PER_HOUR:,.0f} $/h, a price no instance has"


CENTS, TENTHS_OF_A_CENT = Decimal("0.01"), Decimal("0.0001")


def format_dollars(amount: float) -> str:
    """Cents from a dollar up, else tenths of a cent (prices per hour, short runs): "$1,234.50", "$0.0042", "-$12.35".
    Rounded half away from zero from the amount as it prints (0.125 is 0.125, not the float under it), as the
    dashboard's `dollars` rounds (format.js); the sign goes before the dollar sign, and none on what shows as zero."""
    size = Decimal(repr(abs(amount)))
    places = CENTS if amount == 0 or size.quantize(TENTHS_OF_A_CENT, ROUND_HALF_UP) >= 1 else TENTHS_OF_A_CENT
    shown = size.quantize(places, ROUND_HALF_UP)
    return f"{'-' if amount < 0 and shown else ''}${shown:,}"
