"""Fixtures for the Kubernetes provider tests: the fake cluster (tests/fakes_k8s) and the official client on it.

Test files cannot import this module (pytest runs with --import-mode=importlib), so helpers come as fixtures.
Every test runs with loopback-only networking: any attempt to reach another host fails, and so does the test.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes_k8s and fakes_gcp
from fakes_gcp.network_guard import loopback_only  # noqa: E402
from fakes_k8s import FakeCluster, FakeKubernetes  # noqa: E402


@pytest.fixture(autouse=True)
def no_network() -> Iterator[None]:
    with loopback_only() as attempts:
        yield
    assert not attempts, f"the test tried to reach hosts beyond loopback: {attempts}"


@pytest.fixture
def k8s_cluster() -> FakeCluster:
    """The cluster's state before it is served: a test may swap its runner or add nodes first."""
    return FakeCluster(namespaces=("default", "spotrun"))


@pytest.fixture
def k8s(k8s_cluster: FakeCluster) -> Iterator[FakeKubernetes]:
    with FakeKubernetes(k8s_cluster) as fake:
        yield fake
    assert not k8s_cluster.errors, k8s_cluster.errors


@pytest.fixture
def k8s_config(k8s: FakeKubernetes) -> client.Configuration:
    """The token as load_kube_config() sets it, "Bearer " included. Not api_key_prefix={"authorization": "Bearer"}:
    client 36.0.x looks the prefix up under "BearerToken" only, drops it, and a real API server (and this fake)
    answers 401 (kubernetes-client/python#2592, fixed by #2618 after 36.0.3)."""
    return client.Configuration(host=k8s.url, api_key={"authorization": f"Bearer {k8s.token}"})


@pytest.fixture
def core_v1(k8s_config: client.Configuration) -> Iterator[client.CoreV1Api]:
    with client.ApiClient(k8s_config) as api_client:
        yield client.CoreV1Api(api_client)
