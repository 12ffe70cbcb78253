"""Fixtures for the GCP provider tests: the fake Compute API (tests/fakes_gcp) and a provider pointed at it.

Test files cannot import this module (pytest runs with --import-mode=importlib), so helpers come as fixtures.
Every test runs with loopback-only networking: should the SDK try any other host (the real API, a metadata
server for credentials), the attempt fails and so does the test.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes_gcp
from fakes_gcp import FakeCloud, FakeCompute, loopback_only  # noqa: E402

from spotrun.providers.base import LaunchRequest  # noqa: E402
from spotrun.providers.gcp import GcpProvider  # noqa: E402

PROJECT = "spotrun-test"


@pytest.fixture(autouse=True)
def no_network() -> Iterator[None]:
    with loopback_only() as attempts:
        yield
    assert not attempts, f"the test tried to reach hosts beyond loopback: {attempts}"


@pytest.fixture
def compute() -> Iterator[FakeCompute]:
    with FakeCompute(FakeCloud(project=PROJECT)) as fake:
        yield fake


@pytest.fixture
def cloud(compute: FakeCompute) -> FakeCloud:
    return compute.cloud


@pytest.fixture
def make_provider(compute: FakeCompute) -> Callable[..., GcpProvider]:
    def make(**options: Any) -> GcpProvider:
        options = {"project": PROJECT, "call_timeout": 3.0, "poll_interval": 0.01, "operation_timeout": 5.0,
                   "install_command": "pip install spotrun", **options}
        return GcpProvider(
            credentials=AnonymousCredentials(), client_options={"api_endpoint": compute.url}, **options
        )

    return make


@pytest.fixture
def provider(make_provider: Callable[..., GcpProvider]) -> GcpProvider:
    return make_provider()


@pytest.fixture
def launch_request() -> Callable[..., LaunchRequest]:
    def make(token: str = "sr-7-0123456789abcdef", market: str = "spot", zone: str = "us-central1-a",
             instance_type: str = "n1-standard-8", **extra: Any) -> LaunchRequest:
        user_data = {
            "argv": ["/usr/bin/python3.12", "-m", "spotrun.agent"],
            "env": {"SPOTRUN_AGENT_CONFIG": '{"job_id": 7, "token": "agent-secret-token"}', "PATH": "/controller/bin"},
        }
        return LaunchRequest(zone=zone, market=market, instance_type=instance_type, client_token=token,  # type: ignore[arg-type]
                             user_data=user_data, **extra)

    return make
