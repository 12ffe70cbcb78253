"""A GPU attaches to an N1 machine in only some of the zones that offer the machine: zones() offers a job only the
zones that have its GPUs, as many cards as it asks a VM, and a launch where the GPU is missing is that zone's
refusal, not an error retried with the same token for minutes."""

from __future__ import annotations

import pytest

from spotrun.providers.base import NoCapacity


def test_zones_offer_only_those_with_the_jobs_gpus(provider):
    assert provider.zones("n1-standard-8") == ["us-central1-a", "us-central1-b"]  # us-central1-c is DOWN
    assert provider.zones("n1-standard-8", {"V100": 1}) == ["us-central1-b"]
    assert provider.zones("n1-standard-8", {"T4": 4}) == ["us-central1-a", "us-central1-b"]
    assert provider.zones("n1-standard-8", {"nvidia-tesla-t4": 1, "V100": 2}) == ["us-central1-b"]


def test_more_cards_than_a_vm_takes_leave_no_zone(provider):
    assert provider.zones("n1-standard-8", {"T4": 5}) == []
    assert provider.zones("n1-standard-8", {"V100": 8}) == ["us-central1-b"]


def test_each_set_of_gpus_is_listed_once_for_many_placements(provider, cloud):
    for _ in range(3):
        provider.zones("n1-standard-8", {"V100": 1})
        provider.zones("n1-standard-8", {"T4": 1})
        provider.zones("n1-standard-8")
    assert len(cloud.requests_to("GET", "/aggregated/acceleratorTypes")) == 2
    assert len(cloud.requests_to("GET", "/aggregated/machineTypes")) == 1  # the machine's zones, shared by all three


def test_an_unknown_gpu_is_refused_by_name_before_any_call(provider, cloud):
    with pytest.raises(ValueError, match="unknown accelerator 'Z9000'"):
        provider.zones("n1-standard-8", {"Z9000": 1})
    assert cloud.requests == []


def test_a_launch_where_the_gpu_is_missing_is_the_zones_refusal(provider, launch_request, cloud):
    request = launch_request(zone="us-central1-a", market="on-demand", accelerators={"V100": 1})

    with pytest.raises(NoCapacity, match="the zone has no nvidia-tesla-v100"):
        provider.launch(request)
    assert cloud.instances == {}
