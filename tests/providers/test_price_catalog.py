"""The price catalog: on-demand and spot $/h per cloud, instance type and zone."""

from __future__ import annotations

import pytest

from spotrun.costs.catalog import UnknownPrice, instance_types, on_demand_price, price


def test_local_cpu_mirrors_p3_2xlarge_with_a_zone_spread() -> None:
    assert on_demand_price("local", "local.cpu") == price("aws", "p3.2xlarge", "on-demand") == 3.06
    assert price("local", "local.cpu", "spot", "local-a") == price("aws", "p3.2xlarge", "spot") == 0.9731
    assert price("local", "local.cpu", "spot", "local-b") == 1.02
    assert price("local", "local.cpu", "spot", "local-c") == 0.95
    assert price("local", "local.cpu", "spot") == 0.9731  # no zone: the reference price
    assert price("local", "local.gpu", "spot", "local-c") < price("local", "local.gpu", "spot", "local-a")


def test_quoted_cloud_prices() -> None:
    assert (price("aws", "p2.xlarge", "on-demand"), price("aws", "p2.xlarge", "spot", "us-west-2b")) == (0.90, 0.27)
    assert (on_demand_price("aws", "p2.8xlarge"), price("aws", "p2.8xlarge", "spot")) == (14.40, 4.32)
    assert (on_demand_price("aws", "p3.8xlarge"), price("aws", "p3.8xlarge", "spot")) == (12.24, 3.672)
    assert (on_demand_price("gcp", "nvidia-tesla-v100"), price("gcp", "nvidia-tesla-v100", "spot")) == (2.48, 0.74)
    assert price("gcp", "nvidia-tesla-k80", "spot") == 0.135 and price("gcp", "nvidia-tesla-p100", "spot") == 0.43
    assert instance_types("local") == ["local.cpu", "local.gpu"]


def test_unknown_things_get_clear_errors() -> None:
    with pytest.raises(KeyError, match="'m5.large' on aws; known: p2.8xlarge"):
        price("aws", "m5.large", "spot")
    with pytest.raises(UnknownPrice, match="cloud 'azure'"):
        on_demand_price("azure", "x")
    with pytest.raises(UnknownPrice, match="zone 'local-z'"):
        price("local", "local.cpu", "spot", "local-z")
    with pytest.raises(ValueError, match="unknown market 'preemptible'"):
        price("aws", "p3.2xlarge", "preemptible")
