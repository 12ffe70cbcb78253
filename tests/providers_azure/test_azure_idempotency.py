"""A launch is idempotent on its client token: the VM name comes from the token, and an existing VM is returned."""

from __future__ import annotations

import pytest

from spotrun.providers.azure.instances import vm_name


def test_the_same_token_gives_the_same_vm_and_one_create(provider, make_request, arm) -> None:
    first = provider.launch(make_request())
    again = provider.launch(make_request())

    assert again.instance_id == first.instance_id
    assert arm.count("PUT", "/virtualMachines/") == 1
    assert len(arm.vms) == 1


def test_a_second_provider_after_a_controller_crash_finds_the_vm(make_provider, make_request, arm) -> None:
    first = make_provider().launch(make_request())

    again = make_provider().launch(make_request())

    assert again.instance_id == first.instance_id
    assert arm.count("PUT", "/virtualMachines/") == 1


def test_different_tokens_give_different_vms(provider, make_request) -> None:
    one = provider.launch(make_request("sr-1-aaaa"))
    two = provider.launch(make_request("sr-1-bbbb"))

    assert one.instance_id != two.instance_id


def test_a_token_reused_for_another_placement_is_refused(provider, make_request, arm) -> None:
    provider.launch(make_request())

    with pytest.raises(ValueError, match="was used for spotrun-sr-1-0a1b2c3d4e5f6a7b"):
        provider.launch(make_request(zone="eastus-1"))
    assert arm.count("PUT", "/virtualMachines/") == 1


def test_a_vm_of_that_name_with_another_token_is_not_taken_over(provider, make_request, arm) -> None:
    info = provider.launch(make_request())
    arm.vms[info.instance_id.lower()].resource["tags"]["spotrun:client-token"] = "someone-else"

    with pytest.raises(ValueError, match="launched for client token 'someone-else'"):
        provider.launch(make_request())
    assert provider.find_by_token("sr-1-0a1b2c3d4e5f6a7b") is None


def test_find_by_token(provider, make_request) -> None:
    assert provider.find_by_token("sr-1-0a1b2c3d4e5f6a7b") is None

    launched = provider.launch(make_request())

    found = provider.find_by_token("sr-1-0a1b2c3d4e5f6a7b")
    assert found is not None and found.instance_id == launched.instance_id
    assert found.client_token == "sr-1-0a1b2c3d4e5f6a7b"


@pytest.mark.parametrize("token", ["SR-1-Upper", "sr_1 spaces", "x" * 80, "sr-1-"])
def test_tokens_that_make_bad_names_are_hashed_into_a_stable_valid_name(token: str) -> None:
    name = vm_name(token)

    assert name == vm_name(token)
    assert name.startswith("spotrun-") and len(name) <= 64
    assert name.replace("-", "").isalnum() and name == name.lower()
    assert vm_name(token.swapcase()) != name  # case-insensitive Azure names must not merge distinct tokens


def test_a_readable_token_is_its_own_name() -> None:
    assert vm_name("sr-12-0a1b2c3d4e5f6a7b") == "spotrun-sr-12-0a1b2c3d4e5f6a7b"


def test_a_hashed_token_round_trips_through_launch(provider, make_request) -> None:
    info = provider.launch(make_request("Token With Spaces/And Slashes"))

    assert info.instance_id == vm_name("Token With Spaces/And Slashes")
    assert provider.find_by_token("Token With Spaces/And Slashes").instance_id == info.instance_id
