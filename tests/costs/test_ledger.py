"""The ledger's bill of a job: what the clouds charged against the same instances held on-demand."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from spotrun.costs.ledger import attempt_cost, bill, format_bill, format_dollars


@dataclass
class Held:
    market: str = "spot"
    price_per_hour: float = 1.0
    on_demand_price_per_hour: float = 3.0
    started_at: float | None = 0.0
    ended_at: float | None = 100.0
    billed_seconds: float = 100.0
    charged_seconds: float | None = 100.0
    earlier_price_seconds: float = 0.0
    earlier_price_dollars: float = 0.0


def test_an_on_demand_run_under_the_minimum_saves_nothing_rather_than_minus_900_percent():
    short = Held(market="on-demand", price_per_hour=3.0, ended_at=6.0, billed_seconds=6.0, charged_seconds=60.0)
    report = bill([short], now=10.0)
    assert report.cost == pytest.approx(60 / 3600 * 3.0) == pytest.approx(report.on_demand_cost)
    assert report.saved_fraction == 0.0


def test_the_on_demand_side_counts_a_spot_instances_minimum_and_the_seconds_of_one_taken_back_free():
    charged_the_minimum = Held(ended_at=30.0, billed_seconds=30.0, charged_seconds=60.0)
    free = Held(ended_at=500.0, billed_seconds=500.0, charged_seconds=0.0)
    report = bill([charged_the_minimum, free], now=1_000.0)
    assert report.on_demand_cost == pytest.approx((60 + 500) / 3600 * 3.0)
    assert report.cost == pytest.approx(60 / 3600 * 1.0)


def test_an_instance_gone_before_its_price_moved_is_billed_only_the_seconds_it_held():
    """The move was recorded 1,299 s in while the instance was gone at 999 s (the cloud could not be asked): all
    1,299 s were billed."""
    gone = Held(ended_at=999.0, billed_seconds=999.0, charged_seconds=999.0, price_per_hour=2.0,
                earlier_price_seconds=1_299.0, earlier_price_dollars=1_299 / 3600 * 1.0)
    assert attempt_cost(gone, now=2_000.0) == pytest.approx(999 / 3600 * 1.0)


def test_the_seconds_of_the_bill_line_add_up():
    line = format_bill(bill([Held(ended_at=13.6, billed_seconds=13.6, charged_seconds=13.6),
                             Held(market="on-demand", ended_at=26.6, billed_seconds=26.6, charged_seconds=26.6)], 50.0))
    assert line.startswith("ran 40 s (14 s spot, 26 s on-demand)")


@pytest.mark.parametrize(("amount", "shown"), [
    (0.0, "$0.00"), (1_234.5, "$1,234.50"), (0.0042, "$0.0042"),
    (-12.345, "-$12.35"),  # a negative saving read "$-12.3450"
    (0.99996, "$1.00"),  # read "$1.0000": under a dollar before rounding, a dollar after
    (0.99994, "$0.9999"), (-0.5, "-$0.5000"), (-0.00001, "$0.0000"),
    (2.675, "$2.68"), (0.03125, "$0.0313"),  # halves away from zero, as the amounts print (2.675's float is under)
])
def test_dollars_read_with_the_sign_first_and_halves_rounded_away_from_zero(amount, shown):
    assert format_dollars(amount) == shown
