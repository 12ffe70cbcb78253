"""The ledger's bill of a job: what the clouds charged against the same instances held on-demand."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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


def test_a_job_that_ended_without_a_result_is_not_said_to_have_saved():
    """A failed or cancelled job spent its dollars for nothing: its line says so and what the same hours would have
    cost on-demand, not "saved 67%"; a succeeded job's line is as it was."""
    report = bill([Held(ended_at=3_600.0, billed_seconds=3_600.0, charged_seconds=3_600.0)], now=4_000.0)
    assert format_bill(report) == "ran 3,600 s (3,600 s spot, 0 s on-demand): $1.00; on-demand only: $3.00; saved 67%"
    assert format_bill(report, ended_without_result=True) == (
        "ran 3,600 s (3,600 s spot, 0 s on-demand): $1.00 spent without a result; on-demand for the same hours: $3.00"
    )


@pytest.mark.parametrize("stored", [
    {"price_per_hour": 1e308},
    {"on_demand_price_per_hour": 1e308},
    {"price_per_hour": math.inf, "on_demand_price_per_hour": math.inf},
    {"earlier_price_seconds": 1_800.0, "earlier_price_dollars": 1e308},  # 1e308 $/h before the spot price moved
])
def test_an_attempt_stored_at_a_price_no_instance_has_is_left_out_of_the_bill_and_counted(stored):
    """A job stored before prices were capped: 1e308 $/h for 2 h billed inf, and its saving NaN."""
    absurd = Held(ended_at=7_200.0, billed_seconds=7_200.0, charged_seconds=7_200.0, **stored)
    report = bill([absurd, Held()], now=10_000.0)
    assert report == replace(bill([Held()], now=10_000.0), unpriced_attempts=1)
    assert all(math.isfinite(value) for value in report.to_json().values())
    assert format_bill(report).endswith(
        "saved 67%; 1 attempt left out: stored at over 1,000,000 $/h, a price no instance has")


@pytest.mark.parametrize(("amount", "shown"), [
    (0.0, "$0.00"), (1_234.5, "$1,234.50"), (0.0042, "$0.0042"),
    (-12.345, "-$12.35"),  # a negative saving read "$-12.3450"
    (0.99996, "$1.00"),  # read "$1.0000": under a dollar before rounding, a dollar after
    (0.99994, "$0.9999"), (-0.5, "-$0.5000"), (-0.00001, "$0.0000"),
    (2.675, "$2.68"), (0.03125, "$0.0313"),  # halves away from zero, as the amounts print (2.675's float is under)
])
def test_dollars_read_with_the_sign_first_and_halves_rounded_away_from_zero(amount, shown):
    assert format_dollars(amount) == shown
