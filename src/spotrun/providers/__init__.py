"""Where instances come from. `get_provider(name)` gives the provider a job's `resources.cloud` names."""

from __future__ import annotations

from typing import Any

from spotrun.providers.base import (
    InstanceInfo,
    LaunchInvalid,
    LaunchRequest,
    NoCapacity,
    PriceTooLow,
    Provider,
    ProviderError,
    QuotaExceeded,
)
from spotrun.spec.models import CLOUDS


def get_provider(name: str, **options: Any) -> Provider:
    if name == "local":
        from spotrun.providers.local import LocalProvider

        return LocalProvider(**options)
    if name == "aws":
        from spotrun.providers.aws import AwsProvider

        return AwsProvider(**options)
    if name == "gcp":
        from spotrun.providers.gcp import GcpProvider

        return GcpProvider(**options)
    if name == "azure":
        from spotrun.providers.azure import AzureProvider

        return AzureProvider(**options)
    if name == "kubernetes":
        from spotrun.providers.kubernetes import KubernetesProvider

        return KubernetesProvider(**options)
    raise ValueError(f"unknown cloud {name!r}; known: {', '.join(CLOUDS)}")


__all__ = [
    "InstanceInfo", "LaunchInvalid", "LaunchRequest", "NoCapacity", "PriceTooLow", "Provider", "ProviderError", "QuotaExceeded",
    "get_provider",
]
