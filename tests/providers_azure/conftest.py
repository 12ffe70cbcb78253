"""Fixtures for the Azure provider's tests: a fake ARM on 127.0.0.1 (tests/fakes_azure) reached through the real
azure-mgmt-compute client, and a provider built on it.

Test files cannot import this module (pytest runs with --import-mode=importlib), so helpers come as fixtures.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes_azure

from fakes_azure import FakeArm, FakeCredential, LoopbackTransport, vm_sku  # noqa: E402

from spotrun.providers.azure import AzureProvider, AzureSettings  # noqa: E402
from spotrun.providers.base import LaunchRequest  # noqa: E402

SUBSCRIPTION = "8f0c2d4e-1a3b-4c5d-9e7f-0123456789ab"
RESOURCE_GROUP = "spotrun-test"
LOCATION = "eastus"
SUBNET = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/"
    "virtualNetworks/spotrun-vnet/subnets/default"
)
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq7spotrunTestKey spotrun@test"
AGENT_TOKEN = "agent-token-9c1f7e2a"
GPU = "Standard_NC6s_v3"


@pytest.fixture(autouse=True)
def no_azure_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing from the machine's environment reaches the provider (and no real credential is ever built)."""
    for name in list(os.environ):
        if name.startswith(("SPOTRUN_AZURE_", "AZURE_")):
            monkeypatch.delenv(name)


@pytest.fixture
def arm() -> Iterator[FakeArm]:
    with FakeArm(SUBSCRIPTION, LOCATION) as server:
        server.skus = [vm_sku(GPU, LOCATION, ["1", "2", "3"])]
        yield server


@pytest.fixture
def credential() -> FakeCredential:
    return FakeCredential()


@pytest.fixture
def make_provider(arm: FakeArm, credential: FakeCredential) -> Callable[..., AzureProvider]:
    def make(**options: Any) -> AzureProvider:
        settings = {
            "subscription_id": SUBSCRIPTION,
            "resource_group": RESOURCE_GROUP,
            "location": LOCATION,
            "subnet_id": SUBNET,
            "ssh_public_key": SSH_KEY,
            "launch_wait": 10.0,
            "poll_interval": 0.01,
            **options,
        }
        client_options = {"transport": LoopbackTransport(arm.url), "retry_backoff_factor": 0.01}
        return AzureProvider(AzureSettings(**settings), credential=credential, client_options=client_options)

    return make


@pytest.fixture
def provider(make_provider: Callable[..., AzureProvider]) -> AzureProvider:
    return make_provider()


@pytest.fixture
def make_request() -> Callable[..., LaunchRequest]:
    def make(token: str = "sr-1-0a1b2c3d4e5f6a7b", **fields: Any) -> LaunchRequest:
        config = {"controller_url": "http://10.0.0.4:8470", "token": AGENT_TOKEN, "job_id": 1, "attempt_id": 3}
        values: dict[str, Any] = {
            "zone": f"{LOCATION}-2",
            "market": "spot",
            "instance_type": GPU,
            "client_token": token,
            "user_data": {
                "argv": ["/usr/bin/python3.12", "-m", "spotrun.agent"],
                "env": {"SPOTRUN_AGENT_CONFIG": json.dumps(config), "PATH": "/controller/only/bin"},
            },
            **fields,
        }
        return LaunchRequest(**values)

    return make
