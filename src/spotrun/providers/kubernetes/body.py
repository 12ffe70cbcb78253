"""The pod (and its secret) of one launch: the boot command in the image, on a node of the asked zone, type and market.

The boot env carries the agent's token, so it goes into a Secret the pod reads (`envFrom`), never into the pod's
own spec, which anyone allowed to list pods can read. The Secret is owned by the pod once the pod exists, so the
cluster deletes it with the pod.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from spotrun.gcp_accelerators import accelerator_type
from spotrun.kubernetes_flavors import Flavor
from spotrun.providers.base import LaunchRequest
from spotrun.providers.kubernetes.naming import (
    FINALIZER,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MARKET_LABEL,
    TOKEN_ANNOTATION,
    TOKEN_LABEL,
    label_value,
    pod_name,
)
from spotrun.providers.kubernetes.settings import KubernetesSettings
from spotrun.providers.startup import AGENT_CONFIG_ENV_VAR, CLOUD_ENV_VAR, INSTANCE_DISK, boot_env, job_id_of, render_bootstrap

CONTAINER = "spotrun"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
AMD_GPU_RESOURCE = "amd.com/gpu"
ADDRESS_ENV_VAR = "SPOTRUN_INSTANCE_ADDRESS"  # the pod's IP, where the ranks of a multi-node job meet
_DISK_VOLUME = "instance-disk"


def pod_script(user_data: Mapping[str, Any], settings: KubernetesSettings) -> str:
    """The container's bash script: install spotrun if asked, then exec the agent (the container's first process,
    so the kubelet's SIGTERM reaches it), its output left to the container's log."""
    return render_bootstrap(
        user_data, install_command=settings.bootstrap_command, python=settings.python, instance_disk=INSTANCE_DISK,
        agent_log=None, comment="spotrun pod bootstrap, rendered by spotrun.providers.kubernetes",
        export_boot_env=False,
    )


def secret_manifest(request: LaunchRequest, namespace: str) -> dict[str, Any]:
    name = pod_name(request.client_token)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(request, market=False)},
        "type": "Opaque",
        "stringData": boot_env(request.user_data),
    }


def owned_by(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that makes the pod the owner of its secret."""
    metadata = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}
    return {"metadata": {"ownerReferences": [owner]}}


def pod_manifest(request: LaunchRequest, settings: KubernetesSettings) -> dict[str, Any]:
    name = pod_name(request.client_token)
    nodes = settings.nodes
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": termination_grace(request.user_data, settings),
        "nodeSelector": _node_selector(request, settings, nodes),
        "tolerations": _tolerations(request, nodes),
        "automountServiceAccountToken": settings.service_account is not None,
        # the pod's pause process is then PID 1 and reaps the trainer's orphaned children; the agent is still the
        # container's first process, which the kubelet signals
        "shareProcessNamespace": True,
        "containers": [_container(request, settings, name)],
        "volumes": [{"name": _DISK_VOLUME, "emptyDir": {}}],
    }
    if request.market == "on-demand" and nodes.on_demand_value is None:
        # on-demand nodes are those without the spot value (NotIn also takes nodes that lack the label)
        avoided = ((nodes.market_label, nodes.spot_value), *nodes.other_spot_labels)
        term = {"matchExpressions": [{"key": key, "operator": "NotIn", "values": [value]} for key, value in avoided]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    if settings.service_account is not None:
        spec["serviceAccountName"] = settings.service_account
    metadata = {
        "name": name,
        "namespace": settings.namespace,
        "labels": _labels(request, market=True),
        "annotations": {TOKEN_ANNOTATION: request.client_token},
        "finalizers": [FINALIZER],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


AGENT_EXIT_MARGIN = 5  # seconds for the agent to report and exit after its final backup


def termination_grace(user_data: Mapping[str, Any], settings: KubernetesSettings) -> int:
    """The pod's terminationGracePeriodSeconds: the settings', but never less than the SIGTERM grace the agent
    gives the trainer and its backup (the job's notice_grace), or the kubelet's SIGKILL cuts that backup short."""
    env = user_data.get("env") if isinstance(user_data, Mapping) else None
    try:
        config = json.loads(env.get(AGENT_CONFIG_ENV_VAR, "{}")) if isinstance(env, Mapping) else {}
        notice_grace = float(config.get("notice_grace") or 0.0) if isinstance(config, dict) else 0.0
    except (TypeError, ValueError):
        notice_grace = 0.0
    return max(math.ceil(settings.termination_grace), math.ceil(notice_grace) + AGENT_EXIT_MARGIN if notice_grace else 0)


def gpu_resource(accelerators: Mapping[str, int] | None) -> str:
    """The device plugin's extended resource for the GPUs asked: AMD's Instinct (MI...) or NVIDIA's."""
    models = [name for name, count in (accelerators or {}).items() if count]
    return AMD_GPU_RESOURCE if models and all(name.upper().startswith("MI") for name in models) else GPU_RESOURCE


def gpu_count(accelerators: Mapping[str, int] | None) -> int:
    return sum((accelerators or {}).values())


def _container(request: LaunchRequest, settings: KubernetesSettings, name: str) -> dict[str, Any]:
    env = [{"name": ADDRESS_ENV_VAR, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    if settings.metadata_notices:
        env.append({"name": CLOUD_ENV_VAR, "value": settings.metadata_notices})
    requests = {key: value for key, value in (("cpu", settings.cpu), ("memory", settings.memory)) if value}
    resources: dict[str, Any] = {"requests": requests} if requests else {}
    if gpu_count(request.accelerators):
        resources["limits"] = {gpu_resource(request.accelerators): str(gpu_count(request.accelerators))}
    return {
        "name": CONTAINER,
        "image": settings.image,
        "command": ["/bin/bash", "-c", pod_script(request.user_data, settings)],
        "envFrom": [{"secretRef": {"name": name}}],
        "env": env,
        "resources": resources,
        "volumeMounts": [{"name": _DISK_VOLUME, "mountPath": INSTANCE_DISK}],
    }


def _node_selector(request: LaunchRequest, settings: KubernetesSettings, nodes: Flavor) -> dict[str, str]:
    selector = dict(settings.node_selector)
    selector[ZONE_LABEL] = request.zone
    if request.instance_type:
        selector[INSTANCE_TYPE_LABEL] = request.instance_type
    if request.market == "spot":
        selector[nodes.market_label] = nodes.spot_value
    elif nodes.on_demand_value is not None:
        selector[nodes.market_label] = nodes.on_demand_value
    models = sorted(name for name, count in (request.accelerators or {}).items() if count)
    if models and nodes.accelerator_label:
        if len(models) > 1:
            raise ValueError(f"a pod's node has one GPU model; the launch asks for {', '.join(models)}")
        selector[nodes.accelerator_label] = accelerator_type(models[0])
    return selector


def _tolerations(request: LaunchRequest, nodes: Flavor) -> list[dict[str, str]]:
    tolerations = []
    if request.market == "spot" and nodes.spot_taint is not None:
        key, value = nodes.spot_taint
        tolerations.append({"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"})
    if gpu_count(request.accelerators):
        # GPU nodes are commonly tainted so that only pods asking for GPUs land there (EKS, GKE)
        tolerations.append({"key": gpu_resource(request.accelerators), "operator": "Exists", "effect": "NoSchedule"})
        if nodes.gpu_taint is not None:  # a flavor's own GPU taint (AKS)
            key, value = nodes.gpu_taint
            tolerations.append({"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"})
    return tolerations


def _labels(request: LaunchRequest, *, market: bool) -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, TOKEN_LABEL: label_value(request.client_token)}
    job_id = job_id_of(request.user_data)
    if job_id is not None:
        labels[JOB_LABEL] = label_value(job_id)
    if market:
        labels[MARKET_LABEL] = request.market
    return labels
