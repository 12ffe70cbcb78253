"""What a launch asks ARM for: the VM PUT body, as the fake ARM received it through the real SDK pipeline."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from spotrun.providers.azure import AzureProvider

FAKE_SECRET = "azure-client-secret-7e1d0c"


def decoded_custom_data(body: dict) -> str:
    return base64.b64decode(body["properties"]["osProfile"]["customData"]).decode()


def test_spot_launch_asks_for_a_spot_vm_with_delete_eviction_in_the_zone(provider, make_request, arm) -> None:
    info = provider.launch(make_request(max_price=0.35))

    [body] = arm.created_bodies()
    properties = body["properties"]
    assert properties["priority"] == "Spot"
    assert properties["evictionPolicy"] == "Delete"
    assert properties["billingProfile"] == {"maxPrice": 0.35}
    assert body["zones"] == ["2"]
    assert body["location"] == "eastus"
    assert properties["hardwareProfile"] == {"vmSize": "Standard_NC6s_v3"}
    assert body["tags"] == {"spotrun:client-token": "sr-1-0a1b2c3d4e5f6a7b", "spotrun:job": "1"}
    assert (info.instance_id, info.zone, info.market, info.state) == ("spotrun-sr-1-0a1b2c3d4e5f6a7b", "eastus-2", "spot", "running")
    assert info.client_token == "sr-1-0a1b2c3d4e5f6a7b"
    assert info.launched_at is not None


def test_spot_without_a_max_price_pays_up_to_on_demand(provider, make_request, arm) -> None:
    provider.launch(make_request())

    assert arm.created_bodies()[0]["properties"]["billingProfile"] == {"maxPrice": -1.0}


def test_eviction_policy_deallocate_is_a_setting(make_provider, make_request, arm) -> None:
    make_provider(eviction_policy="Deallocate").launch(make_request())

    assert arm.created_bodies()[0]["properties"]["evictionPolicy"] == "Deallocate"


def test_on_demand_launch_is_a_regular_vm_without_spot_fields(provider, make_request, arm) -> None:
    info = provider.launch(make_request(market="on-demand", zone="eastus-3"))

    properties = arm.created_bodies()[0]["properties"]
    assert properties["priority"] == "Regular"
    assert "evictionPolicy" not in properties
    assert "billingProfile" not in properties
    assert arm.created_bodies()[0]["zones"] == ["3"]
    assert (info.market, info.zone) == ("on-demand", "eastus-3")


def test_a_regional_placement_sends_no_zones(provider, make_request, arm) -> None:
    info = provider.launch(make_request(zone="eastus"))

    assert "zones" not in arm.created_bodies()[0]
    assert info.zone == "eastus"


def test_the_vm_brings_its_own_nic_and_disk_and_deletes_them_with_itself(make_provider, make_request, arm) -> None:
    make_provider(public_ip=True, os_disk_size_gb=256).launch(make_request())

    properties = arm.created_bodies()[0]["properties"]
    network = properties["networkProfile"]
    assert network["networkApiVersion"] == "2020-11-01"
    [nic] = network["networkInterfaceConfigurations"]
    assert nic["properties"]["deleteOption"] == "Delete"
    [ip] = nic["properties"]["ipConfigurations"]
    assert ip["properties"]["subnet"]["id"].endswith("/virtualNetworks/spotrun-vnet/subnets/default")
    assert ip["properties"]["publicIPAddressConfiguration"]["properties"]["deleteOption"] == "Delete"
    os_disk = properties["storageProfile"]["osDisk"]
    assert (os_disk["deleteOption"], os_disk["diskSizeGB"], os_disk["createOption"]) == ("Delete", 256, "FromImage")
    assert properties["storageProfile"]["imageReference"] == {
        "publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2404", "version": "latest",
    }
    linux = properties["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert linux["ssh"]["publicKeys"][0]["keyData"].startswith("ssh-ed25519 ")
    assert "adminPassword" not in properties["osProfile"]


def test_an_image_resource_id_and_an_identity_are_passed_through(make_provider, make_request, arm) -> None:
    image = "/subscriptions/8f0c2d4e-1a3b-4c5d-9e7f-0123456789ab/resourceGroups/img/providers/Microsoft.Compute/galleries/g/images/trainer/versions/1.0.0"
    identity = "/subscriptions/8f0c2d4e-1a3b-4c5d-9e7f-0123456789ab/resourceGroups/id/providers/Microsoft.ManagedIdentity/userAssignedIdentities/spotrun-agent"

    make_provider(image=image, identity_id=identity).launch(make_request())

    body = arm.created_bodies()[0]
    assert body["properties"]["storageProfile"]["imageReference"] == {"id": image}
    assert body["identity"] == {"type": "UserAssigned", "userAssignedIdentities": {identity: {}}}


def test_custom_data_installs_spotrun_and_execs_the_agent_on_azure(provider, make_request, arm) -> None:
    provider.launch(make_request())

    script = decoded_custom_data(arm.created_bodies()[0])
    assert script.startswith("#!/bin/bash\n")
    assert "/opt/spotrun/venv/bin/python -m pip install --quiet 'spotrun==" in script
    assert "export SPOTRUN_CLOUD=azure\n" in script
    assert "export SPOTRUN_AZURE_VM_NAME=spotrun-sr-1-0a1b2c3d4e5f6a7b\n" in script
    assert "exec /opt/spotrun/venv/bin/python -m spotrun.agent >>/var/log/spotrun-agent.log 2>&1\n" in script
    assert "/controller/only/bin" not in script  # the controller's PATH stays home
    assert "set -x" not in script
    syntax = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, timeout=10, check=False)
    assert syntax.returncode == 0, syntax.stderr


def test_no_credential_reaches_the_vm(provider, make_request, arm, credential, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_CLIENT_SECRET", FAKE_SECRET)
    provider.launch(make_request())

    body = arm.created_bodies()[0]
    script = decoded_custom_data(body)
    assert "agent-token-9c1f7e2a" in script  # the attempt's own token is meant to be there
    for secret in (credential.token, FAKE_SECRET):
        assert secret not in json.dumps(body)
        assert secret not in script
    assert "export AZURE_" not in script
    # ...while ARM itself did get the bearer token on every request.
    assert credential.requests and all(r.headers["authorization"] == f"Bearer {credential.token}" for r in arm.requests)


def test_azure_never_returns_the_custom_data(provider, make_request, arm) -> None:
    info = provider.launch(make_request())

    vm = provider.compute.virtual_machines.get("spotrun-test", info.instance_id)
    assert vm.os_profile.custom_data is None


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"zone": "westus-1"}, "zone 'westus-1' is not in location 'eastus'"),
        ({"zone": "eastus-a"}, "zone 'eastus-a'"),
        ({"market": "reserved"}, "unknown market"),
        ({"client_token": ""}, "client_token"),
        ({"max_price": 0.0}, "max_price must be > 0"),
        ({"instance_type": ""}, "instance_type"),
    ],
)
def test_bad_requests_are_refused_before_any_call(provider: AzureProvider, make_request, arm, fields, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        provider.launch(make_request(**fields))
    assert arm.requests == []


def test_bad_user_data_is_refused_before_any_vm_is_created(provider, make_request, arm) -> None:
    with pytest.raises(ValueError, match="argv"):
        provider.launch(make_request(user_data={"argv": [], "env": {}}))
    assert arm.requests == []
