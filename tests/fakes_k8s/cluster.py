"""The fake cluster's state and control loops: nodes, pods, secrets, events; scheduler, autoscaler, kubelet, PodGC.

Objects are kept as the JSON the API server speaks (camelCase), so what a test reads is what a client got. One
lock guards everything: the HTTP server's threads, the loop thread (`step` every `tick` seconds) and the test's own
calls (`shut_down_node`, `exit_container`, ...) all take it. What is not part of an object's JSON (whether its
containers were started, when to SIGKILL them) is kept per pod uid in `_PodState`.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from .runner import ContainerConfigError, IdleRunner, Runner
from .selectors import Obj, field_matcher, label_matcher, node_selected, pod_requests, quantity, untolerated_taint

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_PATCHABLE_METADATA = {"labels", "annotations", "finalizers", "ownerReferences", "resourceVersion", "name", "namespace"}
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
NOT_READY = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"


class ApiError(Exception):
    """An error reply, sent as a core/v1 Status."""

    def __init__(self, code: int, reason: str, message: str, name: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.name, self.kind = code, reason, message, name, kind

    def status(self) -> Obj:
        details = {"name": self.name, "kind": self.kind} if self.name or self.kind else {}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": self.reason, "details": details, "code": self.code}


def now_iso(offset: float = 0.0) -> str:
    """RFC 3339 UTC with a Z, to the second, as the API server writes timestamps."""
    return (datetime.now(timezone.utc) + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _shift_times(obj: Any, seconds: float) -> None:
    """Move every timestamp in the object's JSON (fields named *Time, *Timestamp, *At) by `seconds`."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in list(items):
        if isinstance(value, str) and isinstance(key, str) and key.endswith(("Time", "Timestamp", "At")):
            moved = datetime.fromisoformat(value.replace("Z", "+00:00")) + timedelta(seconds=seconds)
            obj[key] = moved.strftime("%Y-%m-%dT%H:%M:%SZ")
        else:
            _shift_times(value, seconds)


def terminal(pod: Obj) -> bool:
    return pod["status"]["phase"] in ("Succeeded", "Failed")


def _ready(node: Obj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


@dataclass
class NodeGroup:
    """A cluster-autoscaler node group (or Karpenter node pool): nodes made on demand from a template."""

    name: str
    labels: dict[str, str]
    taints: list[Obj]
    allocatable: dict[str, str]
    max_nodes: int
    stocked: bool = True  # False: the cloud is out of capacity for it, scale-ups fail
    nodes: list[str] = field(default_factory=list)


@dataclass
class _PodState:
    started: bool = False
    kill_at: float | None = None  # monotonic time at which its containers get SIGKILL
    shutdown: bool = False  # its node is shutting down
    unschedulable: str = ""  # the last FailedScheduling message, reported once
    scale_node: str = ""  # the node a scale-up is making for it
    notes: set[str] = field(default_factory=set)  # scale-up events already reported


class FakeCluster:
    """State and control loops of a one-control-plane cluster; `FakeKubernetes` serves it over HTTP."""

    def __init__(self, namespaces: Iterable[str] = ("default",), runner: Runner | None = None,
                 pod_ip: str = "127.0.0.1", scale_up_delay: float = 0.2, tick: float = 0.05) -> None:
        self.namespaces = set(namespaces)
        self.runner: Runner = runner or IdleRunner()
        self.pod_ip, self.scale_up_delay, self.tick = pod_ip, scale_up_delay, tick
        self.node_groups: dict[str, NodeGroup] = {}
        self.requests: list[tuple[str, str, str, Any]] = []  # (method, path with query, content type, JSON body)
        self.errors: list[str] = []  # tracebacks of failed loop steps: a test may assert there are none
        self.lock = threading.RLock()
        self._version = 0
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[tuple[str, str], Obj] = {}
        self._secrets: dict[tuple[str, str], Obj] = {}
        self._events: list[Obj] = []
        self._states: dict[str, _PodState] = {}
        self._ready_at: dict[str, float] = {}  # nodes a scale-up made, not Ready yet
        self._shutdowns: dict[str, tuple[float, threading.Event]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- for tests ---------------------------------------------------------------------------------------

    @property
    def pods(self) -> list[Obj]:
        with self.lock:
            return copy.deepcopy(list(self._pods.values()))

    @property
    def nodes(self) -> list[Obj]:
        with self.lock:
            return copy.deepcopy(list(self._nodes.values()))

    def pod(self, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return copy.deepcopy(self._pods.get((namespace, name)))

    def wait_for(self, condition: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Poll `condition` until it returns something truthy (returned), or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        while not (result := condition()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s; loop errors: {self.errors}")
            time.sleep(0.01)
        return result

    def add_node(self, name: str, labels: dict[str, str] | None = None, taints: Iterable[Obj] = (),
                 allocatable: dict[str, str] | None = None, ready: bool = True) -> Obj:
        with self.lock:
            self._nodes[name] = self._node_json(name, labels or {}, taints, allocatable, ready)
            return copy.deepcopy(self._nodes[name])

    def add_node_group(self, name: str, labels: dict[str, str], taints: Iterable[Obj] = (),
                       allocatable: dict[str, str] | None = None, max_nodes: int = 1, stocked: bool = True) -> NodeGroup:
        with self.lock:
            group = NodeGroup(name, dict(labels), [dict(t) for t in taints],
                              dict(allocatable or {"cpu": "8", "memory": "32Gi"}), max_nodes, stocked)
            self.node_groups[name] = group
            return group

    def finish_scale_ups(self) -> None:
        """The nodes scale-ups are making come up at the loop's next pass, whatever `scale_up_delay` said."""
        with self.lock:
            for name in self._ready_at:
                self._ready_at[name] = time.monotonic()

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self.lock:
            self._set_ready(self._get("nodes", None, name), ready)

    def exit_container(self, namespace: str, name: str, code: int) -> None:
        """Make the pod's containers exit with `code` (IdleRunner only: a process exits by itself)."""
        with self.lock:
            self.runner.exit(self._get("pods", namespace, name)["metadata"]["uid"], code)  # type: ignore[attr-defined]

    def shut_down_node(self, name: str, grace: float = 25.0) -> threading.Event:
        """A spot reclaim with graceful node shutdown: the node turns NotReady, its pods get SIGTERM and, after
        min(grace, their terminationGracePeriodSeconds), SIGKILL, and end Failed/Terminated; then the node is
        deleted and PodGC deletes its pods. Returns at once; the Event is set when the node is gone."""
        with self.lock:
            self._set_ready(self._get("nodes", None, name), False)
            for pod in self._pods_on(name):
                if not terminal(pod):
                    self._states[pod["metadata"]["uid"]].shutdown = True
                    self._condition(pod, "DisruptionTarget", "True", "TerminationByKubelet", SHUTDOWN_MESSAGE)
                    self._stop_pod(pod, min(grace, pod["spec"]["terminationGracePeriodSeconds"]))
            gone = threading.Event()
            self._shutdowns[name] = (time.monotonic() + grace + 5.0, gone)
            return gone

    def recreate_node(self, name: str) -> None:
        """A spot VM stopped before its kubelet could end its pods and recreated under the same name (as GKE's
        managed instance groups do): its Node object is made again (GKE deletes the Node of a VM whose instance
        changed, cloud-provider-gcp#368), and the new kubelet cannot find the containers of the pods bound to it,
        reports them ContainerStatusUnknown and fails those pods; no DisruptionTarget condition, no status reason."""
        with self.lock:
            old = self._get("nodes", None, name)
            self._nodes[name] = self._node_json(name, old["metadata"]["labels"], old["spec"]["taints"],
                                                old["status"]["allocatable"], True)
            self._containers_lost_on(name)

    def reboot_node(self, name: str) -> None:
        """The node's machine boots again under the same Node object (rebooted, or a spot VM taken back and made
        again under its name, its Node kept): the new kubelet reports a new status.nodeInfo.bootID and, as its
        MachineInfo setter does when the boot id changed, records a Warning "Rebooted" event on the Node; it finds
        none of the containers of the pods bound to it (ContainerStatusUnknown) and fails those pods."""
        with self.lock:
            node = self._get("nodes", None, name)
            node["status"]["nodeInfo"]["bootID"] = str(uuid.uuid4())
            self._touch(node)
            self._kubelet_event(name, "Normal", "Starting", "Starting kubelet.")
            self._kubelet_event(name, "Warning", "Rebooted",
                                f"Node {name} has been rebooted, boot id: {node['status']['nodeInfo']['bootID']}")
            self._containers_lost_on(name)

    def restart_kubelet(self, name: str, reason: str = "", message: str = "") -> None:
        """The node's kubelet restarts (its Node object and boot id stay: no "Rebooted" event, only "Starting"): it
        no longer finds the containers of the pods bound to it (ContainerStatusUnknown) and fails those pods; with a
        `reason`, as kubelet's rejectPod does when it refuses them at their new admission (UnexpectedAdmissionError:
        its device plugin not registered again)."""
        with self.lock:
            self._get("nodes", None, name)  # 404 if there is none
            self._kubelet_event(name, "Normal", "Starting", "Starting kubelet.")
            rejected = {"reason": reason, "message": f"Pod was rejected: {message}"} if reason else {}
            self._containers_lost_on(name, rejected)

    def age(self, seconds: float) -> None:
        """Time passed: what the cluster holds (nodes, pods, secrets, events) as if made and changed `seconds`
        earlier, its timestamps moved back."""
        with self.lock:
            for obj in [*self._nodes.values(), *self._pods.values(), *self._secrets.values(), *self._events]:
                _shift_times(obj, -seconds)

    def wait_node_gone(self, name: str, timeout: float = 10.0) -> None:
        self.wait_for(lambda: name not in self._nodes, timeout)

    def delete_node(self, name: str) -> None:
        """The node vanishes at once (no SIGTERM: its containers are SIGKILLed), then PodGC deletes its pods."""
        with self.lock:
            self._get("nodes", None, name)  # 404 if there is none
            self._remove_node(name)

    # -- the API -----------------------------------------------------------------------------------------

    def record(self, method: str, path: str, content_type: str, body: Any) -> None:
        with self.lock:
            self.requests.append((method, path, content_type, body))

    def list_objects(self, kind: str, namespace: str | None, labels: str | None, fields: str | None) -> Obj:
        try:
            by_labels, by_fields = label_matcher(labels), field_matcher(fields)
        except ValueError as error:
            raise ApiError(400, "BadRequest", str(error)) from None
        with self.lock:
            pool = {"nodes": self._nodes.values(), "pods": self._pods.values(), "secrets": self._secrets.values(),
                    "events": self._events}[kind]
            items = [o for o in pool if (namespace is None or o["metadata"].get("namespace") == namespace)
                     and by_labels(o["metadata"].get("labels") or {}) and by_fields(o)]
            return {"kind": kind[:-1].capitalize() + "List", "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self._version)}, "items": copy.deepcopy(items)}

    def read(self, kind: str, namespace: str | None, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(self._get(kind, namespace, name))

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        with self.lock:
            metadata = self._new_metadata("pods", namespace, body)
            name, spec = metadata["name"], copy.deepcopy(body.get("spec") or {})
            problem = "" if spec.get("containers") else "spec.containers: Required value"
            for index, container in enumerate(spec.get("containers") or []):
                problem = problem or next((f"spec.containers[{index}].{key}: Required value"
                                           for key in ("name", "image") if not container.get(key)), "")
            try:
                pod_requests({"spec": spec})
            except ValueError as error:
                problem = problem or f"spec.containers.resources: Invalid value: {error}"
            if problem:
                raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: {problem}', name, "Pod")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("schedulerName", "default-scheduler")
            pod = {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec,
                   "status": {"phase": "Pending", "conditions": []}}
            self._pods[(namespace, name)] = self._touch(pod)
            self._states[metadata["uid"]] = _PodState()
            return copy.deepcopy(pod)

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        with self.lock:
            metadata = self._new_metadata("secrets", namespace, body)
            data = self._secret_data(metadata["name"], body.get("data") or {}, body.get("stringData") or {})
            secret = {"kind": "Secret", "apiVersion": "v1", "metadata": metadata,
                      "type": body.get("type") or "Opaque", "data": data}
            self._secrets[(namespace, metadata["name"])] = self._touch(secret)
            return copy.deepcopy(secret)

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> Obj:
        """Graceful deletion: deletionTimestamp now + grace, SIGTERM, SIGKILL after the grace; removed once its
        containers are done and it has no finalizers. Deleting a pod being deleted changes nothing."""
        with self.lock:
            pod = self._get("pods", namespace, name)
            if not pod["metadata"].get("deletionTimestamp"):
                grace = pod["spec"]["terminationGracePeriodSeconds"] if grace is None else max(int(grace), 0)
                self._mark_deleted(pod, grace)
                self._stop_pod(pod, grace)
                self._step_pod(pod, time.monotonic())
            return copy.deepcopy(pod)

    def evict_pod(self, namespace: str, name: str, grace: int | None = None) -> Obj:
        with self.lock:
            pod = self._get("pods", namespace, name)
            if not pod["metadata"].get("deletionTimestamp"):
                self._condition(pod, "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting")
            self.delete_pod(namespace, name, grace)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def delete_secret(self, namespace: str, name: str) -> Obj:
        with self.lock:
            uid = self._get("secrets", namespace, name)["metadata"]["uid"]
            del self._secrets[(namespace, name)]
            self._version += 1
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": name, "kind": "secrets", "uid": uid}}

    def patch(self, kind: str, namespace: str, name: str, patch: Any) -> Obj:
        """A JSON merge patch of metadata labels, annotations, finalizers and ownerReferences (and a secret's data);
        a metadata.resourceVersion in the patch must be the current one (optimistic concurrency)."""
        with self.lock:
            obj = self._get(kind, namespace, name)
            allowed = {"metadata", "kind", "apiVersion"} | ({"data", "stringData"} if kind == "secrets" else set())
            metadata = patch.get("metadata") if isinstance(patch, dict) else None
            if not isinstance(patch, dict) or set(patch) - allowed or set(metadata or {}) - _PATCHABLE_METADATA:
                raise ApiError(422, "Invalid", f'{obj["kind"]} "{name}" is invalid: the fake patches only metadata '
                               f"{sorted(_PATCHABLE_METADATA)}" + (" and data" if kind == "secrets" else ""),
                               name, obj["kind"])
            version = (metadata or {}).get("resourceVersion")
            if version is not None and version != obj["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": the object has '
                               "been modified; please apply your changes to the latest version and try again",
                               name, kind)
            changes = {k: v for k, v in patch.items() if k not in ("kind", "apiVersion", "stringData")}
            changes["metadata"] = {k: v for k, v in (metadata or {}).items() if k in _PATCHABLE_METADATA - {
                "resourceVersion", "name", "namespace"}}
            merged = merge_patch(obj, changes)
            if kind == "secrets":
                merged["data"] = self._secret_data(name, merged.get("data") or {}, patch.get("stringData") or {})
            obj.clear()
            obj.update(merged)
            self._touch(obj)
            if kind == "pods":
                self._reap(obj)
            return copy.deepcopy(obj)

    # -- control loops -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fake-k8s-loop", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the loop and kill every container."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self.lock:
            self.runner.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                self.step()
            except Exception:  # noqa: BLE001 (kept for the test to see; the loop must go on)
                self.errors.append(traceback.format_exc())

    def step(self) -> None:
        """One pass of every control loop: nodes coming up, each pod's kubelet/scheduler work, node shutdowns."""
        with self.lock:
            now = time.monotonic()
            for name, at in list(self._ready_at.items()):
                if now >= at:
                    del self._ready_at[name]
                    if name in self._nodes:
                        self._set_ready(self._nodes[name], True)
            for key, pod in list(self._pods.items()):
                if key in self._pods:
                    self._step_pod(pod, now)
            for name, (deadline, gone) in list(self._shutdowns.items()):
                if name not in self._nodes or all(map(terminal, self._pods_on(name))) or now >= deadline:
                    if name in self._nodes:
                        self._remove_node(name)
                    del self._shutdowns[name]
                    gone.set()

    def _step_pod(self, pod: Obj, now: float) -> None:
        state = self._states[pod["metadata"]["uid"]]
        if state.started and not terminal(pod):
            if state.kill_at is not None and now >= state.kill_at:
                self.runner.kill(pod["metadata"]["uid"])
                state.kill_at = None
            codes = self.runner.exited(pod["metadata"]["uid"])
            if len(codes) == len(pod["spec"]["containers"]):
                self._containers_exited(pod, codes)
        elif not terminal(pod):
            if pod["metadata"].get("deletionTimestamp") or state.shutdown:
                self._finish(pod, "Failed")
            elif not pod["spec"].get("nodeName"):
                self._schedule(pod, state)
            elif pod["spec"]["nodeName"] in self._nodes and _ready(self._nodes[pod["spec"]["nodeName"]]):
                self._start(pod, state)
        self._reap(pod)

    def _schedule(self, pod: Obj, state: _PodState) -> None:
        needs, reasons = pod_requests(pod), {}
        for node in self._nodes.values():
            why = self._misfit(pod, node, needs, self._pods_on(node["metadata"]["name"]))
            if why is None:
                pod["spec"]["nodeName"], pod["status"]["hostIP"] = node["metadata"]["name"], self.pod_ip
                self._condition(pod, "PodScheduled", "True")
                self._event(pod, "Normal", "Scheduled", f"Successfully assigned {pod['metadata']['namespace']}/"
                            f"{pod['metadata']['name']} to {node['metadata']['name']}", "default-scheduler")
                return
            reasons[why] = reasons.get(why, 0) + 1
        counts = sorted(f"{count} {why}" for why, count in reasons.items())
        message = f"0/{len(self._nodes)} nodes are available" + (": " if counts else "") + ", ".join(counts) + "."
        self._condition(pod, "PodScheduled", "False", "Unschedulable", message)
        if message != state.unschedulable:
            state.unschedulable = message
            self._event(pod, "Warning", "FailedScheduling", message, "default-scheduler")
        if self.node_groups:
            self._autoscale(pod, state, needs)

    def _misfit(self, pod: Obj, node: Obj, needs: dict[str, float], residents: list[Obj]) -> str | None:
        """Why the pod cannot go on the node (as the scheduler words it), or None when it fits."""
        if not _ready(node):
            return NOT_READY
        if taint := untolerated_taint(pod, node):  # the scheduler's filters run in this order
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        if not node_selected(pod, node):
            return "node(s) didn't match Pod's node affinity/selector"
        used: dict[str, float] = {}
        for other in residents:
            if not terminal(other):
                for resource, amount in pod_requests(other).items():
                    used[resource] = used.get(resource, 0.0) + amount
        for resource, amount in sorted(needs.items()):
            if amount and used.get(resource, 0.0) + amount > quantity(node["status"]["allocatable"].get(resource, 0)):
                return f"Insufficient {resource}"
        return None

    def _autoscale(self, pod: Obj, state: _PodState, needs: dict[str, float]) -> None:
        """cluster-autoscaler: a node from the first group whose template fits, if it has stock and room."""
        if state.scale_node in self._ready_at:
            return  # a node is on its way
        reasons: list[str] = []
        for group in self.node_groups.values():
            template = self._node_json(group.name, group.labels, group.taints, group.allocatable, True)
            live = [n for n in group.nodes if n in self._nodes]
            why = self._misfit(pod, template, needs, [])
            if why is None and len(live) >= group.max_nodes:
                why = "max node group size reached"
            if why is None and not group.stocked:
                if f"stock:{group.name}" not in state.notes:
                    state.notes.add(f"stock:{group.name}")
                    self._event(pod, "Warning", "FailedScaleUp", f"Node scale up in node group {group.name} associated"
                                " with this pod failed: out of resources. Pod is at risk of not being scheduled.",
                                "cluster-autoscaler")
                return
            if why is None:
                name = f"{group.name}-{uuid.uuid4().hex[:5]}"
                self._nodes[name] = self._node_json(name, group.labels, group.taints, group.allocatable, False)
                group.nodes.append(name)
                self._ready_at[name], state.scale_node = time.monotonic() + self.scale_up_delay, name
                self._event(pod, "Normal", "TriggeredScaleUp", f"pod triggered scale-up: [{{{group.name} "
                            f"{len(live)}->{len(live) + 1} (max: {group.max_nodes})}}]", "cluster-autoscaler")
                return
            reasons.append(f"1 {why}")
        if "none" not in state.notes:
            state.notes.add("none")
            self._event(pod, "Normal", "NotTriggerScaleUp", f"pod didn't trigger scale-up: {', '.join(reasons)}",
                        "cluster-autoscaler")

    def _start(self, pod: Obj, state: _PodState) -> None:
        """The kubelet starts the containers through the runner (or reports why it cannot)."""
        status, started = pod["status"], now_iso()
        status.setdefault("startTime", started)
        status["podIP"], status["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        try:
            self.runner.start(copy.deepcopy(pod), lambda ns, name: copy.deepcopy(self._secrets.get((ns, name))))
        except ContainerConfigError as error:
            waiting = {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}
            statuses = [self._container_status(c, False, waiting) for c in pod["spec"]["containers"]]
            if status.get("containerStatuses") != statuses:
                status["containerStatuses"] = statuses
                self._event(pod, "Warning", "Failed", f"Error: {error}", "kubelet")
            return
        state.started = True
        status["phase"] = "Running"
        status["containerStatuses"] = [self._container_status(c, True, {"running": {"startedAt": started}})
                                       for c in pod["spec"]["containers"]]
        for kind in ("Initialized", "ContainersReady", "Ready"):
            self._condition(pod, kind, "True")
        self._event(pod, "Normal", "Started", "Started container " + pod["spec"]["containers"][0]["name"], "kubelet")

    @staticmethod
    def _container_status(container: Obj, running: bool, state: Obj) -> Obj:
        return {"name": container["name"], "image": container["image"], "imageID": "", "ready": running,
                "started": running, "restartCount": 0, "state": state}

    def _containers_exited(self, pod: Obj, codes: dict[str, int]) -> None:
        finished = now_iso()
        for status in pod["status"]["containerStatuses"]:
            code = codes[status["name"]]
            started = status["state"].get("running", {}).get("startedAt", finished)
            status.update(ready=False, started=False, state={"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": started,
                "finishedAt": finished}})
        self.runner.kill(pod["metadata"]["uid"])  # what the containers left behind dies with them
        self._finish(pod, "Succeeded" if all(code == 0 for code in codes.values()) else "Failed")

    def _containers_lost_on(self, node: str, status: Obj | None = None) -> None:
        """A new kubelet on the node fails the pods bound to it whose containers it cannot find (kubelet's
        TerminatePod), with `status` (reason, message) where it says why."""
        for pod in self._pods_on(node):
            if not terminal(pod):
                self.runner.kill(pod["metadata"]["uid"])
                for container in pod["status"].get("containerStatuses") or []:
                    container.update(ready=False, started=False, state={"terminated": {
                        "exitCode": 137, "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated"}})
                pod["status"].update(status or {})
                self._finish(pod, "Failed")
                self._touch(pod)

    def _finish(self, pod: Obj, phase: str) -> None:
        if self._states[pod["metadata"]["uid"]].shutdown:
            phase = "Failed"
            pod["status"].update(reason="Terminated", message=SHUTDOWN_MESSAGE)
        pod["status"]["phase"] = phase
        for kind in ("ContainersReady", "Ready"):
            self._condition(pod, kind, "False", "PodCompleted")

    def _stop_pod(self, pod: Obj, grace: float) -> None:
        """SIGTERM now (unless grace is 0), SIGKILL when the grace is over."""
        state = self._states[pod["metadata"]["uid"]]
        if state.started and not terminal(pod):
            if grace > 0:
                self.runner.terminate(pod["metadata"]["uid"])
            state.kill_at = min(state.kill_at or float("inf"), time.monotonic() + grace)
        self._touch(pod)

    def _mark_deleted(self, pod: Obj, grace: int) -> None:
        pod["metadata"]["deletionTimestamp"] = now_iso(grace)
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self._touch(pod)

    def _reap(self, pod: Obj) -> None:
        """A terminal pod being deleted, with no finalizers left, is removed, and the secrets it owns with it."""
        meta = pod["metadata"]
        if terminal(pod) and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            if self._pods.get((meta["namespace"], meta["name"])) is pod:
                del self._pods[(meta["namespace"], meta["name"])]
                self._version += 1
            for key, secret in list(self._secrets.items()):
                if any(ref.get("uid") == meta["uid"] for ref in secret["metadata"].get("ownerReferences") or []):
                    del self._secrets[key]

    def _remove_node(self, name: str) -> None:
        """The node object is deleted; PodGC force-deletes the pods still bound to it."""
        del self._nodes[name]
        self._version += 1
        for pod in self._pods_on(name):
            if not terminal(pod):
                self.runner.kill(pod["metadata"]["uid"])
                self._condition(pod, "DisruptionTarget", "True", "DeletionByPodGC", "PodGC: node no longer exists")
                self._finish(pod, "Failed")
            if not pod["metadata"].get("deletionTimestamp"):
                self._mark_deleted(pod, 0)
            self._reap(pod)

    # -- helpers -----------------------------------------------------------------------------------------

    def _touch(self, obj: Obj) -> Obj:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        return obj

    def _new_metadata(self, kind: str, namespace: str, body: Any) -> Obj:
        if namespace not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found', namespace, "namespaces")
        metadata = copy.deepcopy((body or {}).get("metadata") or {}) if isinstance(body, dict) else {}
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
        name, rule = metadata.get("name") or "", _DNS_LABEL if kind == "pods" else _DNS_SUBDOMAIN
        if not rule.fullmatch(name):
            kind_name = kind[:-1].capitalize()
            raise ApiError(422, "Invalid", f'{kind_name} "{name}" is invalid: metadata.name: Invalid value: "{name}": '
                           f"a lowercase RFC 1123 {'label' if kind == 'pods' else 'subdomain'} must consist of lower "
                           "case alphanumeric characters or '-', and must start and end with an alphanumeric "
                           "character", name, kind_name)
        if (namespace, name) in (self._pods if kind == "pods" else self._secrets):
            raise ApiError(409, "AlreadyExists", f'{kind} "{name}" already exists', name, kind)
        metadata.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_iso())
        return metadata

    def _secret_data(self, name: str, data: Obj, string_data: Obj) -> Obj:
        try:
            for value in data.values():
                base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError):
            raise ApiError(422, "Invalid", f'Secret "{name}" is invalid: data: illegal base64 data', name,
                           "Secret") from None
        return {**data, **{k: base64.b64encode(str(v).encode()).decode() for k, v in string_data.items()}}

    def _node_json(self, name: str, labels: dict[str, str], taints: Iterable[Obj],
                   allocatable: dict[str, str] | None, ready: bool) -> Obj:
        allocatable = dict(allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"})
        node = {"kind": "Node", "apiVersion": "v1",
                "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now_iso(),
                             "labels": {"kubernetes.io/hostname": name, **labels}},
                "spec": {"taints": [dict(t) for t in taints]},
                "status": {"capacity": dict(allocatable), "allocatable": allocatable, "conditions": [],
                           "addresses": [{"type": "InternalIP", "address": self.pod_ip}],
                           "nodeInfo": self._node_info()}}
        self._set_ready(node, ready)
        return node

    @staticmethod
    def _node_info() -> Obj:
        """status.nodeInfo as a kubelet reports it (the client's model requires every field)."""
        return {"architecture": "amd64", "bootID": str(uuid.uuid4()), "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.0-27-cloud-amd64", "kubeProxyVersion": "", "kubeletVersion": "v1.31.2",
                "machineID": uuid.uuid4().hex, "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12 (bookworm)",
                "systemUUID": str(uuid.uuid4())}

    def _set_ready(self, node: Obj, ready: bool) -> None:
        reason, message = ("KubeletReady", "kubelet is posting ready status") if ready else (
            "KubeletNotReady", "node is shutting down or not ready")
        node["status"]["conditions"] = [{"type": "Ready", "status": str(ready), "reason": reason, "message": message,
                                         "lastHeartbeatTime": now_iso(), "lastTransitionTime": now_iso()}]
        self._touch(node)

    def _condition(self, pod: Obj, kind: str, status: str, reason: str | None = None, message: str | None = None) -> None:
        conditions = pod["status"].setdefault("conditions", [])
        old = next((c for c in conditions if c["type"] == kind), None)
        new = {"type": kind, "status": status, "reason": reason, "message": message, "lastProbeTime": None,
               "lastTransitionTime": old["lastTransitionTime"] if old and old["status"] == status else now_iso()}
        new = {k: v for k, v in new.items() if v is not None}
        if old != new:
            conditions[:] = [c for c in conditions if c["type"] != kind] + [new]
            self._touch(pod)

    def _event(self, obj: Obj, kind: str, reason: str, message: str, component: str) -> None:
        """Record an event; one already there for the same object and reason gets its count bumped instead."""
        meta, stamp = obj["metadata"], now_iso()
        for event in self._events:
            if event["involvedObject"]["uid"] == meta["uid"] and event["reason"] == reason:
                event.update(count=event["count"] + 1, message=message, lastTimestamp=stamp)
                self._touch(event)
                return
        self._events.append(self._touch({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta.get("namespace"),
                         "uid": str(uuid.uuid4()), "creationTimestamp": stamp},
            "involvedObject": {"kind": obj["kind"], "apiVersion": "v1", "name": meta["name"],
                               "namespace": meta.get("namespace"), "uid": meta["uid"]},
            "reason": reason, "message": message, "type": kind, "count": 1, "firstTimestamp": stamp,
            "lastTimestamp": stamp, "source": {"component": component}, "reportingComponent": component}))

    def _kubelet_event(self, node: str, kind: str, reason: str, message: str) -> None:
        """An event the kubelet records about its Node: its reference to the node has the node's name for a uid and
        no namespace, and client-go's recorder puts the event of an object without one in "default"."""
        stamp = now_iso()
        self._events.append(self._touch({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": f"{node}.{uuid.uuid4().hex[:16]}", "namespace": "default", "uid": str(uuid.uuid4()),
                         "creationTimestamp": stamp},
            "involvedObject": {"kind": "Node", "name": node, "uid": node},
            "reason": reason, "message": message, "type": kind, "count": 1, "firstTimestamp": stamp,
            "lastTimestamp": stamp, "source": {"component": "kubelet", "host": node}, "reportingComponent": "kubelet",
            "reportingInstance": node}))

    def _pods_on(self, node: str) -> list[Obj]:
        return [pod for pod in self._pods.values() if pod["spec"].get("nodeName") == node]

    def _get(self, kind: str, namespace: str | None, name: str) -> Obj:
        found = self._nodes.get(name) if kind == "nodes" else (
            self._pods if kind == "pods" else self._secrets).get((namespace or "", name))
        if found is None:
            raise ApiError(404, "NotFound", f'{kind} "{name}" not found', name, kind)
        return found
