"""Kubernetes as a provider: each attempt is one pod on a node of the asked zone, instance type and market.

The cluster's own node provisioner (Karpenter, the cluster autoscaler, GKE's or AKS's) brings spot nodes up and
the cloud takes them back; spotrun only picks nodes by their labels (`kubernetes_flavors`). A pod that no node
takes and no provisioner will bring a node up for is a refused launch (NoCapacity), so the placement moves on.

Every pod carries a finalizer of spotrun's, so a pod that ended (a node reclaimed and its pods garbage collected)
stays readable until spotrun has read how it ended; `terminate` lets it go. Reads ask for the API's JSON as it is
(`_preload_content=False`): the pod is read as the API documents it, not through the client's models.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from spotrun.providers.base import InstanceInfo, LaunchRequest, NoCapacity, check_token_and_market
from spotrun.providers.kubernetes.body import INSTANCE_TYPE_LABEL, ZONE_LABEL, owned_by, pod_manifest, secret_manifest
from spotrun.providers.kubernetes.errors import CALL_ERRORS, KubernetesApiError, translate
from spotrun.providers.kubernetes.naming import (
    FINALIZER,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    TOKEN_ANNOTATION,
    TOKEN_LABEL,
    label_value,
    parse_instance_id,
)
from spotrun.providers.kubernetes.pods import (
    NODE_REBOOTED,
    gone_info,
    is_scheduled,
    lost_with_its_node,
    node_rebooted,
    node_replaced,
    pod_info,
    provisioner_verdict,
    state_of,
    unknown_info,
    unschedulable_message,
)
from spotrun.providers.kubernetes.settings import KubernetesSettings
from spotrun.providers.zone_cache import ZoneCache

log = logging.getLogger(__name__)

CLOUD = "kubernetes"
MAX_CLIENT_TOKEN_LENGTH = 253
MERGE_PATCH = "application/merge-patch+json"
_LET_GO_TRIES = 5
_ENDED_KEPT = 1024  # pods whose end this process remembers after letting them go
_FORBIDDEN, _NOT_FOUND, _CONFLICT = 403, 404, 409
# Where the kubelet's events about its Node are: client-go's recorder puts the event of an object with no namespace
# (the kubelet's reference to its node has none) in "default"
NODE_EVENTS_NAMESPACE = "default"
Pod = dict[str, Any]


class KubernetesProvider:
    """Pods in one namespace of one cluster, described by `KubernetesSettings` (arguments here override
    SPOTRUN_KUBERNETES_* variables). `configuration` points the client elsewhere (tests: a fake API server);
    otherwise it comes from the kubeconfig, or from the pod's service account inside a cluster."""

    name = CLOUD
    max_lifetime_seconds = None

    def __init__(
        self,
        settings: KubernetesSettings | None = None,
        *,
        configuration: k8s.Configuration | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        **options: Any,
    ) -> None:
        if settings is not None and options:
            raise TypeError("pass either settings or individual options, not both")
        self.settings = settings or KubernetesSettings.from_env(**options)
        self.namespace = self.settings.namespace
        self.api = k8s.CoreV1Api(k8s.ApiClient(configuration or _configuration(self.settings)))
        self._sleep = sleep
        self._clock = clock
        self._zone_cache = ZoneCache()
        # How pods that spotrun let go had ended: a describe after terminate still tells a reclaim.
        self._ended: dict[str, InstanceInfo] = {}
        self._ended_lock = threading.Lock()
        self._events_forbidden_said = False

    # -- where -------------------------------------------------------------------------------------------

    def zones(self, instance_type: str, accelerators: Mapping[str, int] | None = None) -> list[str]:
        """The zones the settings name, else those of the cluster's nodes of the type (asked at most every 10
        minutes). A cluster that scales a node pool from zero has no such nodes: name its zones then."""
        if self.settings.zones:
            return list(self.settings.zones)
        return self._zone_cache.zones(instance_type, lambda: self._node_zones(instance_type))

    def _node_zones(self, instance_type: str) -> list[str]:
        selector = {**dict(self.settings.node_selector), **({INSTANCE_TYPE_LABEL: instance_type} if instance_type else {})}
        nodes = self._call("list nodes", self.api.list_node, label_selector=_selector(selector))
        return sorted({node["metadata"]["labels"][ZONE_LABEL] for node in nodes["items"]
                       if ZONE_LABEL in (node["metadata"].get("labels") or {})})

    # -- launch ------------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> InstanceInfo:
        _validate(request)
        manifest = pod_manifest(request, self.settings)
        self._create_secret(request)
        pod = self._create_pod(manifest, request)
        self._own_secret(pod)
        pod = self._await_node(pod, request)
        info = pod_info(pod)
        log.info(
            "launched %s: %s %s in %s (client token %s)",
            info.instance_id, request.market, request.instance_type, request.zone, request.client_token,
        )
        return info

    def _create_secret(self, request: LaunchRequest) -> None:
        secret = secret_manifest(request, self.namespace)
        self._call("create secret", self.api.create_namespaced_secret, self.namespace, secret, tolerate=(_CONFLICT,))

    def _create_pod(self, manifest: Pod, request: LaunchRequest) -> Pod:
        name = manifest["metadata"]["name"]
        try:
            created = self._call("create pod", self.api.create_namespaced_pod, self.namespace, manifest,
                                 tolerate=(_CONFLICT,))
        except Exception:
            self._delete_secret(name)
            raise
        if created is not None:
            return created
        # The name comes from the client token: a pod with it is this launch's, made before.
        existing = self._read(name)
        if existing is None:
            raise KubernetesApiError("create pod", "Conflict", f"pod {name} exists, then did not")
        _check_same_request(existing, request)
        return existing

    def _own_secret(self, pod: Pod) -> None:
        name = pod["metadata"]["name"]
        self._call("patch secret", self.api.patch_namespaced_secret, name, self.namespace, owned_by(pod),
                   _content_type=MERGE_PATCH)

    def _await_node(self, pod: Pod, request: LaunchRequest) -> Pod:
        """The pod once a node took it or a provisioner is bringing one up; NoCapacity (the pod removed) once the
        scheduler finds no node and the provisioner refused, or `schedule_timeout` passed."""
        name = pod["metadata"]["name"]
        deadline = self._clock() + self.settings.schedule_timeout
        while True:
            if is_scheduled(pod) or state_of(pod) != "pending":
                return pod
            verdict = self._provisioner_verdict(pod)
            if verdict is not None and verdict[0] == "scaling":
                return pod
            waiting = unschedulable_message(pod)
            refused = verdict is not None and verdict[0] == "refused"
            if waiting is not None and (refused or self._clock() >= deadline):
                self._refuse(name, request, waiting if verdict is None else f"{waiting}; {verdict[1]}")
            if self._clock() >= deadline:
                return pod  # the scheduler has not judged it yet: the controller's boot timeout watches it
            self._sleep(self.settings.poll_interval)
            pod = self._read(name) or pod

    def _refuse(self, name: str, request: LaunchRequest, why: str) -> None:
        self._delete(name, grace=0)
        self._let_go(name)
        self._delete_secret(name)
        where = f"{request.market} {request.instance_type or 'node'} in {request.zone}"
        raise NoCapacity(f"no node for {where} ({why})")

    def _provisioner_verdict(self, pod: Pod) -> tuple[str, str] | None:
        """The node provisioner's word on the pod; its saying it will not scale up is a refusal once it has said so
        for `schedule_timeout`. Events are picked by the pod's uid: those of a pod deleted and made again under its
        name outlive it (an hour, by default), and are not this pod's."""
        metadata = pod["metadata"]
        selector = f"involvedObject.kind=Pod,involvedObject.name={metadata['name']},involvedObject.uid={metadata['uid']}"
        namespace = metadata.get("namespace") or self.namespace
        events = self._call("list events", self.api.list_namespaced_event, namespace, field_selector=selector)["items"]
        return provisioner_verdict(events, now=time.time(), patience=self.settings.schedule_timeout)

    # -- look --------------------------------------------------------------------------------------------

    def describe(self, instance_id: str) -> InstanceInfo:
        """The API's view; a failed call answers state="unknown". A pod spotrun already let go is answered as it
        had ended, if this process let it go, else as gone."""
        namespace, name = parse_instance_id(instance_id)
        try:
            pod = self._read(name, namespace)
        except KubernetesApiError as error:
            return unknown_info(namespace, name, str(error))
        if pod is None:
            with self._ended_lock:
                return self._ended.get(instance_id) or gone_info(namespace, name)
        try:
            info = self._pod_info(pod)
        except KubernetesApiError as error:  # whether its node went is not known
            return unknown_info(namespace, name, str(error))
        waiting = unschedulable_message(pod) if info.state == "pending" and not is_scheduled(pod) else None
        if waiting is not None:
            # a scale-up the provisioner began and then failed (the cloud had no spot capacity) leaves the pod
            # pending for good: a refused launch, told as AWS's and Azure's late refusals are
            try:
                verdict = self._provisioner_verdict(pod)
            except KubernetesApiError as error:  # whether it waits for capacity is not known, nor its boot's start
                return unknown_info(namespace, name, str(error))
            if verdict is not None and verdict[0] == "refused":
                detail = {**info.detail, "refusal": "no_capacity", "reason": f"{waiting}; {verdict[1]}"}
                return dataclasses.replace(info, state="terminated", detail=detail)
            if verdict is not None:  # a node is on its way, or not yet to be had: the pod cannot begin to boot
                return dataclasses.replace(info, boot_began_at=time.time())
        return info

    def find_by_token(self, client_token: str) -> InstanceInfo | None:
        pods = self._list_pods(f"{TOKEN_LABEL}={label_value(client_token)}")
        mine = [pod for pod in pods if (pod["metadata"].get("annotations") or {}).get(TOKEN_ANNOTATION) == client_token]
        return pod_info(mine[0], time.time()) if mine else None

    def list_instances(self) -> list[InstanceInfo]:
        """Every pod spotrun launched in the namespace, ended ones still held by its finalizer included."""
        return [pod_info(pod, time.time()) for pod in self._list_pods(f"{MANAGED_BY_LABEL}={MANAGED_BY}")]

    def _pod_info(self, pod: Pod) -> InstanceInfo:
        """pod_info, with the pod's node read where only it tells a reclaim from a kubelet that lost the pod's
        containers without going (raises KubernetesApiError where it cannot be read)."""
        now = time.time()
        if not lost_with_its_node(pod, now):
            return pod_info(pod, now)
        return pod_info(pod, now, node_replaced=self._node_went(pod))

    def _node_went(self, pod: Pod) -> bool:
        """Whether the pod's node went since the pod was bound: gone, its Node made again, or its machine booted
        again under the same Node (a spot VM taken back and given again under its name)."""
        name = pod["spec"]["nodeName"]
        node = self._call("read node", self.api.read_node, name, tolerate=(_NOT_FOUND,))
        return node_replaced(pod, node) or node_rebooted(pod, self._node_reboots(name))

    def _node_reboots(self, node_name: str) -> list[dict[str, Any]]:
        """The kubelet's Rebooted events of the node (the API server keeps events an hour by default, --event-ttl);
        none where RBAC does not let spotrun list the events of NODE_EVENTS_NAMESPACE: a reboot is then not seen,
        as before spotrun looked for it."""
        selector = f"involvedObject.kind=Node,involvedObject.name={node_name},reason={NODE_REBOOTED}"
        events = self._call("list node events", self.api.list_namespaced_event, NODE_EVENTS_NAMESPACE,
                            field_selector=selector, tolerate=(_FORBIDDEN,))
        if events is None:
            if not self._events_forbidden_said:  # once: the permission is optional, and this is asked per lost pod
                log.warning("may not list events in namespace %s: whether a node rebooted under its pods is not "
                            "known (node %s; docs/clouds/kubernetes.md, RBAC)", NODE_EVENTS_NAMESPACE, node_name)
                self._events_forbidden_said = True
            return []
        return events["items"]

    def _list_pods(self, selector: str) -> list[Pod]:
        return self._call("list pods", self.api.list_namespaced_pod, self.namespace, label_selector=selector)["items"]

    def _read(self, name: str, namespace: str | None = None) -> Pod | None:
        """The pod as the API describes it; None when it has none."""
        return self._call("read pod", self.api.read_namespaced_pod, name, namespace or self.namespace,
                          tolerate=(_NOT_FOUND,))

    # -- end ---------------------------------------------------------------------------------------------

    def terminate(self, instance_id: str) -> None:
        """Idempotent. Deletes the pod (its containers get the pod's grace) and lets go of it, so it is removed once
        its containers have stopped; how it had ended is kept for `describe`. Deletes its secret too: a launch that
        failed before the pod came to own it leaves it to no one."""
        namespace, name = parse_instance_id(instance_id)
        if namespace != self.namespace:
            raise ValueError(f"{instance_id} is not in this provider's namespace {self.namespace}")
        pod = self._read(name)
        if pod is not None:
            if state_of(pod, time.time()) == "terminated":
                self._remember_end(instance_id, self._ended_info(pod))
            self._delete(name)
            self._let_go(name)
            log.info("deleting %s", instance_id)
        self._delete_secret(name)

    def preempt(self, instance_id: str, notice_seconds: float | None = None) -> None:
        """Chaos: evict the pod as a drain of its node would, its containers given `notice_seconds` (else the
        pod's own grace)."""
        namespace, name = parse_instance_id(instance_id)
        options = k8s.V1DeleteOptions(grace_period_seconds=round(notice_seconds)) if notice_seconds is not None else None
        eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace), delete_options=options)
        self._call("evict pod", self.api.create_namespaced_pod_eviction, name, namespace, eviction)

    def _ended_info(self, pod: Pod) -> InstanceInfo:
        """How the pod ended, for a describe after terminate; not called reclaimed where its node cannot be read:
        the terminate goes on."""
        try:
            return self._pod_info(pod)
        except KubernetesApiError as error:
            log.warning("reading the node of pod %s: %s", pod["metadata"]["name"], error)
            return pod_info(pod, time.time())

    def _remember_end(self, instance_id: str, info: InstanceInfo) -> None:
        """Kept for the describe that follows a terminate; the oldest are dropped, so a long-lived controller
        does not keep every pod it ever ended."""
        with self._ended_lock:
            self._ended[instance_id] = info
            while len(self._ended) > _ENDED_KEPT:
                del self._ended[next(iter(self._ended))]

    def _delete(self, name: str, grace: int | None = None) -> None:
        options = k8s.V1DeleteOptions(grace_period_seconds=grace, propagation_policy="Background")
        self._call("delete pod", self.api.delete_namespaced_pod, name, self.namespace, body=options,
                   tolerate=(_NOT_FOUND,))

    def _let_go(self, name: str) -> None:
        """Take spotrun's finalizer off the pod, leaving any other's (a merge patch with the resourceVersion read,
        so a finalizer added meanwhile is not lost: a conflict reads again)."""
        for _ in range(_LET_GO_TRIES):
            pod = self._read(name)
            finalizers = (pod or {}).get("metadata", {}).get("finalizers") or []
            if pod is None or FINALIZER not in finalizers:
                return
            rest = [finalizer for finalizer in finalizers if finalizer != FINALIZER]
            patch = {"metadata": {"finalizers": rest, "resourceVersion": pod["metadata"]["resourceVersion"]}}
            patched = self._call("remove finalizer", self.api.patch_namespaced_pod, name, self.namespace, patch,
                                 _content_type=MERGE_PATCH, tolerate=(_NOT_FOUND, _CONFLICT))
            if patched is not None:
                return
            # gone (the next read says so) or changed meanwhile (read again)
        raise KubernetesApiError("remove finalizer", "Conflict", f"pod {name} kept changing; tried {_LET_GO_TRIES} times")

    def _delete_secret(self, name: str) -> None:
        """Best effort: a pod that owns its secret has the cluster delete it with the pod anyway."""
        try:
            self._call("delete secret", self.api.delete_namespaced_secret, name, self.namespace, tolerate=(_NOT_FOUND,))
        except KubernetesApiError as error:
            log.warning("deleting secret %s/%s: %s", self.namespace, name, error)

    # -- calls -------------------------------------------------------------------------------------------

    def _call(
        self, what: str, method: Callable[..., Any], *args: Any, tolerate: tuple[int, ...] = (), **kwargs: Any,
    ) -> Any:
        """The call's answer as the API's JSON; None where the API answered a status of `tolerate` (404: none,
        409: made before, or changed meanwhile); any other failure translated (QuotaExceeded, KubernetesApiError)."""
        try:
            response = method(*args, _preload_content=False, _request_timeout=self.settings.call_timeout, **kwargs)
        except ApiException as error:
            if error.status in tolerate:
                return None
            raise translate(error, what) from error
        except CALL_ERRORS as error:
            raise translate(error, what) from error
        return json.loads(response.data) if response.data else None


def _configuration(settings: KubernetesSettings) -> k8s.Configuration:
    """The kubeconfig's cluster and credentials (the named file and context, else the defaults); inside a cluster
    without a kubeconfig, the pod's service account."""
    configuration = k8s.Configuration()
    try:
        k8s_config.load_kube_config(
            config_file=settings.kubeconfig, context=settings.context, client_configuration=configuration,
            persist_config=False,
        )
    except (k8s_config.ConfigException, FileNotFoundError) as error:
        if settings.kubeconfig or settings.context:
            raise ValueError(f"cannot use the kubeconfig ({settings.kubeconfig or 'default'}): {error}") from error
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException as inside:
            raise ValueError(f"no Kubernetes cluster: no usable kubeconfig ({error}) and not in a cluster ({inside})") from inside
    return configuration


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in labels.items())


def _validate(request: LaunchRequest) -> None:
    check_token_and_market(request, MAX_CLIENT_TOKEN_LENGTH)
    if not request.zone:
        raise ValueError("launch request needs a zone (a node's topology.kubernetes.io/zone)")
    # The cluster's nodes have their prices; a pod takes no bid: max_price is not sent.


def _check_same_request(existing: Pod, request: LaunchRequest) -> None:
    info = pod_info(existing)
    if info.client_token != request.client_token:
        raise ValueError(f"pod {info.instance_id} exists but was not launched for client token {request.client_token!r}")
    had = (info.zone, info.market, info.instance_type)
    asked = (request.zone, request.market, request.instance_type)
    if had != asked:
        raise ValueError(f"client token {request.client_token!r} was used for {info.instance_id} {had}, not for {asked}")

