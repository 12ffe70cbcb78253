"""Launching through the real google-cloud-compute REST transport against the fake Compute API."""

from __future__ import annotations

import uuid

import pytest

from spotrun.providers.base import LaunchRequest
from spotrun.providers.gcp import PREEMPTIBLE_MAX_LIFETIME_SECONDS, GcpApiError
from spotrun.providers.gcp.naming import instance_name, request_id

TOKEN = "sr-7-0123456789abcdef"


def inserted(cloud) -> dict:
    (insert,) = cloud.requests_to("POST", "/instances")
    return insert


def test_spot_launch_sends_a_spot_vm_deleted_on_preemption(provider, launch_request, cloud):
    info = provider.launch(launch_request())

    insert = inserted(cloud)
    body = insert.body
    assert insert.path == "/compute/v1/projects/spotrun-test/zones/us-central1-a/instances"
    assert insert.query["requestId"] == request_id(TOKEN)
    assert uuid.UUID(insert.query["requestId"]).version == 5
    assert body["name"] == f"spotrun-{TOKEN}"
    assert body["machineType"] == "zones/us-central1-a/machineTypes/n1-standard-8"
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
    }
    assert body["labels"] == {"spotrun-token": TOKEN, "spotrun-job": "7", "spotrun-market": "spot"}
    metadata = {item["key"]: item["value"] for item in body["metadata"]["items"]}
    assert metadata["spotrun-client-token"] == TOKEN
    assert metadata["startup-script"].startswith("#!/bin/bash\n")
    assert "export SPOTRUN_CLOUD=gcp" in metadata["startup-script"]
    assert body["disks"][0]["boot"] is True and body["disks"][0]["autoDelete"] is True
    assert body["networkInterfaces"][0]["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT"
    assert "guestAccelerators" not in body

    assert info.instance_id == f"us-central1-a/spotrun-{TOKEN}"
    assert (info.zone, info.market, info.instance_type, info.state) == ("us-central1-a", "spot", "n1-standard-8", "running")
    assert info.client_token == TOKEN
    assert info.address == "34.70.0.9"
    assert info.launched_at is not None and not info.reclaimed


def test_on_demand_launch_is_a_standard_vm(provider, launch_request, cloud):
    info = provider.launch(launch_request(market="on-demand"))

    scheduling = inserted(cloud).body["scheduling"]
    assert scheduling["provisioningModel"] == "STANDARD"
    assert scheduling["onHostMaintenance"] == "MIGRATE"
    assert "instanceTerminationAction" not in scheduling
    assert info.market == "on-demand" and info.state == "running"


def test_accelerators_become_guest_accelerators_and_stop_live_migration(provider, cloud):
    request = LaunchRequest(
        zone="us-central1-b", market="on-demand", instance_type="n1-standard-8", client_token="sr-8-aa",
        user_data={"argv": ["python", "-m", "spotrun.agent"], "env": {}}, accelerators={"V100": 2},
    )
    provider.launch(request)

    body = inserted(cloud).body
    assert body["guestAccelerators"] == [
        {"acceleratorType": "zones/us-central1-b/acceleratorTypes/nvidia-tesla-v100", "acceleratorCount": 2}
    ]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"  # GCE refuses GPUs with MIGRATE


def test_unknown_accelerator_is_refused_before_any_call(provider, cloud):
    request = LaunchRequest(
        zone="us-central1-a", market="spot", instance_type="n1-standard-8", client_token="sr-8-ab",
        user_data={"argv": ["python"], "env": {}}, accelerators={"Z9000": 1},
    )
    with pytest.raises(ValueError, match="unknown accelerator 'Z9000'"):
        provider.launch(request)
    assert cloud.requests == []


def test_legacy_preemptible_vms_and_their_24_hour_limit(make_provider, launch_request, cloud):
    provider = make_provider(preemptible=True)
    info = provider.launch(launch_request())

    assert inserted(cloud).body["scheduling"] == {
        "automaticRestart": False, "onHostMaintenance": "TERMINATE", "preemptible": True,
    }
    assert info.market == "spot"
    assert provider.max_lifetime_seconds == PREEMPTIBLE_MAX_LIFETIME_SECONDS == 24 * 3600


def test_spot_max_run_duration(make_provider, launch_request, cloud):
    provider = make_provider(max_run_duration=7200)
    provider.launch(launch_request())

    assert inserted(cloud).body["scheduling"]["maxRunDuration"] == {"seconds": "7200"}
    assert provider.max_lifetime_seconds == 7200


def test_spot_vms_have_no_lifetime_limit_by_default(provider):
    assert provider.max_lifetime_seconds is None


def test_same_token_twice_gives_one_instance(provider, launch_request, cloud):
    first = provider.launch(launch_request())
    again = provider.launch(launch_request())

    assert again.instance_id == first.instance_id
    assert len(cloud.instances) == 1
    inserts = cloud.requests_to("POST", "/instances")
    assert [insert.query["requestId"] for insert in inserts] == [request_id(TOKEN)] * 2


def test_same_token_after_request_ids_expired_meets_the_existing_instance(provider, launch_request, cloud):
    first = provider.launch(launch_request())
    cloud.forget_request_ids()

    again = provider.launch(launch_request())

    assert again.instance_id == first.instance_id and again.state == "running"
    assert len(cloud.instances) == 1


def test_same_token_for_another_market_is_refused(provider, launch_request, cloud):
    provider.launch(launch_request())
    cloud.forget_request_ids()

    with pytest.raises(ValueError, match="was used for"):
        provider.launch(launch_request(market="on-demand"))


def test_an_instance_of_that_name_from_another_token_is_not_taken_for_ours(provider, launch_request, cloud):
    long_token = "X" * 80  # not a valid name part: hashed
    provider.launch(launch_request(token=long_token))
    name = instance_name(long_token)
    # Someone else's instance holding the name our token maps to (as if two tokens hashed alike).
    instance = cloud.instances[("us-central1-a", name)]
    instance["metadata"]["items"] = [item for item in instance["metadata"]["items"] if item["key"] != "spotrun-client-token"]
    cloud.forget_request_ids()

    with pytest.raises(ValueError, match="not launched for client token"):
        provider.launch(launch_request(token=long_token))


def test_launch_waits_for_the_insert_operation(make_provider, launch_request, cloud):
    cloud.operation_polls = 3
    info = make_provider().launch(launch_request())

    assert info.state == "running"
    assert len(cloud.requests_to("POST", "/operations/")) == 3


def test_launch_gives_up_on_an_operation_that_never_ends(make_provider, launch_request, cloud):
    cloud.operation_polls = 10**9
    provider = make_provider(operation_timeout=0.3, poll_interval=0.05)

    with pytest.raises(GcpApiError, match="not done after"):
        provider.launch(launch_request())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"client_token": ""}, "needs a client_token"),
        ({"market": "reserved"}, "unknown market"),
        ({"zone": "us-central1"}, "not a GCE zone"),
        ({"instance_type": ""}, "needs an instance_type"),
    ],
)
def test_bad_requests_are_refused_before_any_call(provider, launch_request, cloud, change, message):
    request = launch_request()
    bad = LaunchRequest(**{**request.__dict__, **change})
    with pytest.raises(ValueError, match=message):
        provider.launch(bad)
    assert cloud.requests == []
