"""Kubernetes provider: `KubernetesProvider(**options)` (options: the fields of `KubernetesSettings`, else
SPOTRUN_KUBERNETES_* variables). Needs the `kubernetes` extra."""

from spotrun.providers.kubernetes.errors import KubernetesApiError
from spotrun.providers.kubernetes.provider import KubernetesProvider
from spotrun.providers.kubernetes.settings import KubernetesSettings

__all__ = ["KubernetesApiError", "KubernetesProvider", "KubernetesSettings"]
