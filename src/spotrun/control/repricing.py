"""A running spot attempt follows its zone's price.

An attempt records spot's price when it launches, but EC2 moves each zone's spot price over days, and bills the
seconds of a running instance at the price of their time. A job on spot for days would be reported at the price
of its first hour. So while an attempt runs, each tick compares its price with what its zone costs now (the quote
`MarketPrices` keeps a few minutes) and, where that moved, keeps the seconds held so far and their dollars
(`earlier_price_seconds`, `earlier_price_dollars`) and bills the rest at the new price (`costs.ledger`).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from spotrun.costs.ledger import held_dollars, held_seconds
from spotrun.state import Attempt, add_event


def follows_price(attempt: Attempt) -> bool:
    """Whether the attempt's price follows its zone's quote: a spot instance held and running."""
    return attempt.market == "spot" and attempt.started_at is not None and attempt.ended_at is None


def reprice(session: Session, attempt: Attempt, price: float, now: float) -> None:
    """Bill the running spot `attempt` (`follows_price`) at `price`, another than its own, from `now` on."""
    old = attempt.price_per_hour
    attempt.earlier_price_dollars = held_dollars(attempt, now)
    attempt.earlier_price_seconds = max(held_seconds(attempt, now), attempt.earlier_price_seconds)
    attempt.price_per_hour = price
    add_event(
        session, at=now, kind="spot_price_moved", job_id=attempt.job_id, attempt_id=attempt.id,
        message=f"attempt {attempt.number}: spot in {attempt.zone} now ${price:.4f}/h (was ${old:.4f}/h); "
        f"${attempt.earlier_price_dollars:.4f} for its first {attempt.earlier_price_seconds:.0f} s",
        data={"zone": attempt.zone, "from": old, "to": price},
    )
