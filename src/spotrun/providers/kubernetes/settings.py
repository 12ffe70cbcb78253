"""How the Kubernetes provider runs attempts: cluster, namespace, image, how spot nodes are told apart; from arguments
or SPOTRUN_KUBERNETES_* variables.

Credentials are not settings: the official client reads them from the kubeconfig (`kubeconfig`, `context`) or,
inside a cluster, from the pod's service account; spotrun never stores or forwards them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from spotrun.kubernetes_flavors import FLAVOR_ENV_VAR, Flavor, flavor_named
from spotrun.providers.env_settings import key_value_pairs, settings_values

ENV_PREFIX = "SPOTRUN_KUBERNETES_"
DEFAULT_IMAGE = "python:3.12-slim"
DEFAULT_PYTHON = "python"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
# A resource quantity as the API server parses one (apimachinery's resource.ParseQuantity: the pattern the OpenAPI
# schema gives a Quantity, its exponent an integer as the parser wants), without the minus a request may not have.
# Not kubernetes.utils.parse_quantity: it takes what Python's Decimal reads ("NaN", "1_000", " 4", "1e3m").
_QUANTITY = re.compile(r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")


def default_install_command(python: str = DEFAULT_PYTHON) -> str:
    """For an image without spotrun: this spotrun version from PyPI (the image needs Python >= 3.11 and pip)."""
    return f"{python} -m pip install --quiet --no-cache-dir 'spotrun=={metadata.version('spotrun')}'"


@dataclass(frozen=True)
class KubernetesSettings:
    flavor: str | None = None  # karpenter | eks | gke | aks: how spot nodes are labelled (kubernetes_flavors)
    market_label: str | None = None  # overrides the flavor's node label that tells spot from on-demand
    spot_value: str | None = None
    on_demand_value: str | None = None  # None: on-demand nodes are those without the spot value
    spot_taint: str | None = None  # "KEY=VALUE": a NoSchedule taint on spot nodes, tolerated by spot pods
    namespace: str = "default"
    kubeconfig: str | None = None  # None: $KUBECONFIG or ~/.kube/config, else the in-cluster service account
    context: str | None = None  # a kubeconfig context; None: its current one
    image: str = DEFAULT_IMAGE  # the container image; one with the job's libraries and spotrun saves the install
    python: str = DEFAULT_PYTHON  # the image's interpreter that runs the agent
    install_command: str | None = None  # None: pip install this spotrun version; "" or "true": the image has it
    service_account: str | None = None  # the pod's service account (e.g. one allowed to write the bucket)
    zones: tuple[str, ...] = ()  # zones the cluster can give nodes in; empty: those of its nodes of the type
    node_selector: tuple[tuple[str, str], ...] = ()  # more labels every node must have ("pool=training,...")
    cpu: str | None = None  # each pod's CPU request, e.g. "7"; None: none
    memory: str | None = None  # each pod's memory request, e.g. "28Gi"; None: none
    termination_grace: float = 120.0  # the pod's terminationGracePeriodSeconds (a node shutdown may give less)
    # how long a launch waits for a node or a scale-up, and the autoscaler's NotTriggerScaleUp stands, before the
    # launch counts as refused
    schedule_timeout: float = 180.0
    call_timeout: float = 30.0  # one API call, connection included
    poll_interval: float = 1.0  # pause between looks at a pod waiting to be scheduled
    metadata_notices: str | None = None  # aws | gcp | azure: also watch the node's metadata service (where reachable)

    def __post_init__(self) -> None:
        if self.flavor is None and self.market_label is None:
            raise ValueError(
                f"say how the cluster marks spot nodes: {FLAVOR_ENV_VAR} (karpenter, eks, gke, aks) or "
                f"{ENV_PREFIX}MARKET_LABEL with {ENV_PREFIX}SPOT_VALUE"
            )
        if self.flavor is not None:
            flavor_named(self.flavor)
        if self.flavor is None and not self.spot_value:
            raise ValueError(f"{ENV_PREFIX}MARKET_LABEL needs {ENV_PREFIX}SPOT_VALUE, the label's value on spot nodes")
        if self.market_label is not None and not _LABEL_KEY.fullmatch(self.market_label):
            raise ValueError(f"market_label must be a Kubernetes label key, got {self.market_label!r}")
        if not _DNS_LABEL.fullmatch(self.namespace):
            raise ValueError(f"namespace must be a DNS label (lowercase letters, digits, '-'), got {self.namespace!r}")
        if not self.image.strip():
            raise ValueError("image must name a container image")
        if not self.python.strip():
            raise ValueError("python must name the image's interpreter, got an empty string")
        if self.spot_taint is not None:
            _taint(self.spot_taint)
        for key, _ in self.node_selector:
            if not _LABEL_KEY.fullmatch(key):
                raise ValueError(f"node_selector has {key!r}, which is not a Kubernetes label key")
        for name in ("cpu", "memory"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and _QUANTITY.fullmatch(value)):
                raise ValueError(f"{name} must be a Kubernetes quantity such as 4, 500m, 1e3 or 16Gi, got {value!r}")
        for name in ("schedule_timeout", "call_timeout", "poll_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.termination_grace < 0:
            raise ValueError(f"termination_grace must be >= 0, got {self.termination_grace}")
        if self.metadata_notices not in (None, "aws", "gcp", "azure"):
            raise ValueError(f"metadata_notices must be aws, gcp or azure, got {self.metadata_notices!r}")

    @property
    def nodes(self) -> Flavor:
        """The flavor's labelling, with whatever these settings override."""
        base = flavor_named(self.flavor) if self.flavor else Flavor("", "", None)
        taint = _taint(self.spot_taint) if self.spot_taint is not None else base.spot_taint
        # a label of one's own has no on-demand value but the one given with it
        own_label = self.market_label is not None
        on_demand = self.on_demand_value if own_label or self.on_demand_value else base.on_demand_value
        return dataclasses.replace(
            base, market_label=self.market_label or base.market_label, spot_value=self.spot_value or base.spot_value,
            on_demand_value=on_demand, spot_taint=taint,
        )

    @property
    def bootstrap_command(self) -> str:
        if self.install_command is None:
            return default_install_command(self.python)
        return self.install_command.strip() or "true"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> KubernetesSettings:
        """SPOTRUN_KUBERNETES_<FIELD> variables (zones comma-separated, node_selector "k=v,k=v"), then `overrides`."""
        values = settings_values(cls, ENV_PREFIX, "Kubernetes", environ, overrides, {"node_selector": key_value_pairs})
        if isinstance(values.get("node_selector"), Mapping):
            values["node_selector"] = tuple(values["node_selector"].items())
        for name in ("zones", "node_selector"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


def _taint(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not _LABEL_KEY.fullmatch(key):
        raise ValueError(f"spot_taint must be KEY=VALUE with a label key, got {text!r}")
    return key, value
