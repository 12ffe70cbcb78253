"""The clouds' billing rules (`costs.billing`): minimums, and a spot interruption free in AWS's first hour."""

from __future__ import annotations

import pytest

from spotrun.costs.billing import CLOUD_RULES, PER_SECOND, rule_for

AWS = CLOUD_RULES["aws"]


@pytest.mark.parametrize(("market", "held", "reclaimed", "charged"), [
    ("spot", 3599.0, True, 0.0),  # EC2 took it back in its first hour: free
    ("spot", 3600.0, True, 3600.0),  # ... from the first hour on: the seconds used
    ("spot", 1200.0, False, 1200.0),  # spotrun (the user) terminated it: the seconds used, first hour or not
    ("spot", 30.0, False, 60.0),  # the minute's minimum
    ("spot", 30.0, True, 0.0),
    ("on-demand", 1200.0, True, 1200.0),  # only spot is ever free
    ("on-demand", 10.0, False, 60.0),
    ("spot", 0.0, False, 0.0),  # never held: never charged, minimum or not
])
def test_aws_charges(market, held, reclaimed, charged):
    assert AWS.charged_seconds(held, market=market, reclaimed=reclaimed) == charged


@pytest.mark.parametrize("cloud", ["gcp", "azure"])
def test_gcp_and_azure_charge_a_minute_at_least_and_never_nothing_for_an_interruption(cloud):
    rule = CLOUD_RULES[cloud]
    assert rule.charged_seconds(20.0, market="spot", reclaimed=True) == 60.0
    assert rule.charged_seconds(1200.0, market="spot", reclaimed=True) == 1200.0
    assert not rule.reclaim_would_be_free(market="spot", started_at=0.0, reclaim_at=10.0)


def test_a_reclaim_is_free_when_the_cloud_takes_the_instance_inside_the_first_hour():
    assert AWS.reclaim_would_be_free(market="spot", started_at=1000.0, reclaim_at=1000.0 + 3599)
    assert not AWS.reclaim_would_be_free(market="spot", started_at=1000.0, reclaim_at=1000.0 + 3600)
    assert not AWS.reclaim_would_be_free(market="on-demand", started_at=1000.0, reclaim_at=1010.0)


def test_the_reclaim_is_expected_when_the_notice_says_or_the_clouds_lead_after_it():
    assert AWS.expected_reclaim(5000.0) == 5120.0  # EC2 takes the instance 2 minutes after its notice
    assert AWS.expected_reclaim(5000.0, stated=5090.0) == 5090.0  # the notice was seen 30 s late
    assert AWS.expected_reclaim(5000.0, stated=4990.0) == 5000.0  # a clock a little off: not before the notice
    assert CLOUD_RULES["gcp"].expected_reclaim(5000.0) == 5000.0  # a rule that knows no lead: at once


def test_a_cloud_without_rules_charges_the_seconds_held():
    assert rule_for("local") is PER_SECOND and rule_for("another") is PER_SECOND
    assert PER_SECOND.charged_seconds(0.5, market="spot", reclaimed=True) == 0.5
