"""How each kind of Kubernetes cluster marks its spot nodes, and whose cloud bills them.

A pod does not choose spot or on-demand capacity itself: it selects nodes by the label the cluster's node
provisioner puts on them. Each managed flavour has its own label, values and taint, as its documentation gives
them; the Kubernetes provider (`providers.kubernetes`) selects nodes by them, and the prices (`costs`) come from
the cloud the nodes belong to. A leaf module, so that both layers read one table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

FLAVOR_ENV_VAR = "SPOTRUN_KUBERNETES_FLAVOR"
NODES_CLOUD_ENV_VAR = "SPOTRUN_KUBERNETES_NODES_CLOUD"
NODE_CLOUDS = ("aws", "gcp", "azure")


@dataclass(frozen=True)
class Flavor:
    market_label: str  # the node label that tells spot from on-demand capacity
    spot_value: str
    on_demand_value: str | None  # None: on-demand nodes lack the label (or carry another value)
    spot_taint: tuple[str, str] | None = None  # (key, value) of the NoSchedule taint spot nodes may carry
    accelerator_label: str | None = None  # a node label naming the GPU model, where GPUs are not part of the type
    nodes_cloud: str | None = None  # whose prices the nodes cost
    # (label, value) of other capacity the cloud may take back (GKE's older preemptible node pools): on-demand pods
    # avoid it too, where on-demand nodes are told by the lack of the spot value
    other_spot_labels: tuple[tuple[str, str], ...] = ()
    gpu_taint: tuple[str, str] | None = None  # (key, value) of the NoSchedule taint GPU nodes carry, by convention


FLAVORS: Mapping[str, Flavor] = {
    # Karpenter (EKS and others): NodePools label every node with its capacity type
    "karpenter": Flavor("karpenter.sh/capacity-type", "spot", "on-demand", nodes_cloud="aws"),
    # EKS managed node groups
    "eks": Flavor("eks.amazonaws.com/capacityType", "SPOT", "ON_DEMAND", nodes_cloud="aws"),
    # GKE Spot node pools; GKE adds the taint when the pool is created with it, and names each node's GPU
    "gke": Flavor(
        "cloud.google.com/gke-spot", "true", None, spot_taint=("cloud.google.com/gke-spot", "true"),
        accelerator_label="cloud.google.com/gke-accelerator", nodes_cloud="gcp",
        other_spot_labels=(("cloud.google.com/gke-preemptible", "true"),),
    ),
    # AKS Spot node pools always carry the taint; AKS's GPU guide has GPU node pools made with sku=gpu:NoSchedule
    "aks": Flavor(
        "kubernetes.azure.com/scalesetpriority", "spot", None,
        spot_taint=("kubernetes.azure.com/scalesetpriority", "spot"), nodes_cloud="azure", gpu_taint=("sku", "gpu"),
    ),
}


def flavor_named(name: str) -> Flavor:
    found = FLAVORS.get(name)
    if found is None:
        raise ValueError(f"unknown Kubernetes flavor {name!r}; known: {', '.join(FLAVORS)}")
    return found


def nodes_cloud(environ: Mapping[str, str] = os.environ) -> str | None:
    """The cloud whose prices a Kubernetes job's nodes cost: $SPOTRUN_KUBERNETES_NODES_CLOUD, else the flavor's
    ($SPOTRUN_KUBERNETES_FLAVOR); None when neither says. ValueError for a name neither table knows."""
    named = environ.get(NODES_CLOUD_ENV_VAR, "").strip().lower()
    if named:
        if named not in NODE_CLOUDS:
            raise ValueError(f"${NODES_CLOUD_ENV_VAR} must be one of {', '.join(NODE_CLOUDS)}, got {named!r}")
        return named
    flavor = environ.get(FLAVOR_ENV_VAR, "").strip()
    return flavor_named(flavor).nodes_cloud if flavor else None
