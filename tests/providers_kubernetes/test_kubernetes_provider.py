"""The Kubernetes provider through the official client against the fake cluster (tests/fakes_k8s): launches and
their refusals, reclaims told from other ends after the node is gone, terminate and its finalizer, and failures."""

from __future__ import annotations

import base64
import json
import threading
import time

import pytest
from kubernetes.client.exceptions import ApiException

from spotrun.providers.base import LaunchRequest, NoCapacity, QuotaExceeded
from spotrun.providers.kubernetes import KubernetesApiError, KubernetesProvider, KubernetesSettings
from spotrun.providers.kubernetes.body import pod_manifest
from spotrun.providers.kubernetes.errors import translate
from spotrun.providers.kubernetes.naming import FINALIZER
from spotrun.providers.kubernetes.pods import unschedulable_message

NAMESPACE = "spotrun"
TYPE = "g5.xlarge"
CONFIG = json.dumps({"job_id": 3, "token": "agent-token-3"})


def node_labels(zone: str, capacity: str) -> dict[str, str]:
    return {"topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": TYPE,
            "karpenter.sh/capacity-type": capacity}


GPU_NODE = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}


@pytest.fixture
def nodes(k8s_cluster):
    k8s_cluster.add_node("spot-a", node_labels("us-east-1a", "spot"), allocatable=GPU_NODE)
    k8s_cluster.add_node("spot-b", node_labels("us-east-1b", "spot"), allocatable=GPU_NODE)
    k8s_cluster.add_node("od-a", node_labels("us-east-1a", "on-demand"), allocatable=GPU_NODE)
    return k8s_cluster


def make_provider(config, **options) -> KubernetesProvider:
    settings = {"flavor": "karpenter", "namespace": NAMESPACE, "install_command": "", "schedule_timeout": 1.0,
                "poll_interval": 0.02, "call_timeout": 5.0, **options}
    return KubernetesProvider(KubernetesSettings(**settings), configuration=config)


@pytest.fixture
def provider(k8s, k8s_config, nodes) -> KubernetesProvider:
    return make_provider(k8s_config)


def request(zone="us-east-1a", token="sr-3-00aa11bb22cc33dd", market="spot", gpus=1) -> LaunchRequest:
    return LaunchRequest(
        zone=zone, market=market, instance_type=TYPE, client_token=token,
        user_data={"argv": ["python", "-m", "spotrun.agent"], "env": {"SPOTRUN_AGENT_CONFIG": CONFIG}},
        accelerators={"A10G": gpus} if gpus else None,
    )


def launch(provider, zone="us-east-1a", market="spot", token="sr-3-00aa11bb22cc33dd", gpus=1):
    return provider.launch(request(zone, token, market, gpus))


def running(provider, instance_id):
    return provider.describe(instance_id).state == "running"


def test_a_spot_launch_lands_on_a_spot_node_of_the_zone_and_its_secret_holds_the_token(provider, k8s_cluster):
    info = launch(provider)
    assert info.instance_id == f"{NAMESPACE}/spotrun-sr-3-00aa11bb22cc33dd"
    assert (info.zone, info.market, info.instance_type, info.client_token) == ("us-east-1a", "spot", TYPE, "sr-3-00aa11bb22cc33dd")
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    pod = k8s_cluster.pod(NAMESPACE, "spotrun-sr-3-00aa11bb22cc33dd")
    assert pod["spec"]["nodeName"] == "spot-a"
    assert "agent-token-3" not in json.dumps(pod)
    [secret] = [body for method, path, _, body in k8s_cluster.requests if method == "POST" and path.endswith("/secrets")]
    assert json.loads(secret["stringData"]["SPOTRUN_AGENT_CONFIG"])["token"] == "agent-token-3"
    patches = [body for method, path, _, body in k8s_cluster.requests if method == "PATCH" and "/secrets/" in path]
    assert patches[0]["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert provider.describe(info.instance_id).address == "127.0.0.1"
    assert provider.zones(TYPE) == ["us-east-1a", "us-east-1b"]
    assert provider.zones("p5.48xlarge") == []


def test_on_demand_goes_to_the_on_demand_node(provider, k8s_cluster):
    info = launch(provider, market="on-demand", token="sr-3-od")
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    assert k8s_cluster.pod(NAMESPACE, "spotrun-sr-3-od")["spec"]["nodeName"] == "od-a"
    assert provider.describe(info.instance_id).market == "on-demand"


def test_a_repeated_launch_finds_its_pod_and_a_reused_token_is_refused(provider, k8s_cluster):
    first = launch(provider)
    again = launch(provider)
    assert again.instance_id == first.instance_id
    assert len([p for p in k8s_cluster.pods if p["metadata"]["namespace"] == NAMESPACE]) == 1
    with pytest.raises(ValueError, match="was used for"):
        launch(provider, zone="us-east-1b")


def test_no_node_and_no_provisioner_is_a_capacity_refusal_that_leaves_nothing_behind(provider, k8s_cluster):
    launch(provider, token="sr-3-first")  # takes spot-a's only GPU
    with pytest.raises(NoCapacity, match=r"no node for spot g5.xlarge in us-east-1a \(0/3 nodes are available"):
        launch(provider, token="sr-3-second")
    k8s_cluster.wait_for(lambda: k8s_cluster.pod(NAMESPACE, "spotrun-sr-3-second") is None)
    with pytest.raises(ApiException) as missing:
        provider.api.read_namespaced_secret("spotrun-sr-3-second", NAMESPACE)
    assert missing.value.status == 404


def test_a_scale_up_is_waited_for_and_a_stockout_refused_at_once(k8s, k8s_config, k8s_cluster):
    k8s_cluster.add_node_group("spot-c", node_labels("us-east-1c", "spot"), allocatable=GPU_NODE)
    k8s_cluster.add_node_group("spot-d", node_labels("us-east-1d", "spot"), allocatable=GPU_NODE, stocked=False)
    provider = make_provider(k8s_config, schedule_timeout=30.0)
    info = launch(provider, zone="us-east-1c", token="sr-3-scaled")
    assert info.state in ("pending", "running")
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    started = time.monotonic()
    with pytest.raises(NoCapacity, match="FailedScaleUp"):
        launch(provider, zone="us-east-1d", token="sr-3-stockout")
    assert time.monotonic() - started < 10, "a provisioner's refusal needs no waiting for the timeout"


def test_a_node_group_at_its_max_size_is_waited_for_not_refused_at_once(k8s, k8s_config, k8s_cluster):
    k8s_cluster.add_node_group("spot-c", node_labels("us-east-1c", "spot"), allocatable=GPU_NODE, max_nodes=1)
    provider = make_provider(k8s_config, schedule_timeout=30.0)
    first = launch(provider, zone="us-east-1c", token="sr-3-first")
    k8s_cluster.wait_for(lambda: running(provider, first.instance_id))
    # the group is at its max size and its node busy: NotTriggerScaleUp, until the first pod ends and frees it

    def free_the_node_once_the_launch_has_read_the_wait() -> None:
        k8s_cluster.wait_for(lambda: any(e["reason"] == "NotTriggerScaleUp" for e in k8s_cluster._events), timeout=20)
        told = len(k8s_cluster.requests)  # a launch taking NotTriggerScaleUp for a refusal refuses by its 2nd read
        k8s_cluster.wait_for(lambda: sum("/events" in r[1] for r in k8s_cluster.requests[told:]) >= 2, timeout=20)
        k8s_cluster.exit_container(NAMESPACE, "spotrun-sr-3-first", 0)

    done = threading.Thread(target=free_the_node_once_the_launch_has_read_the_wait)
    done.start()
    try:
        second = launch(provider, zone="us-east-1c", token="sr-3-second")
    finally:
        done.join()
    assert any(e["reason"] == "NotTriggerScaleUp" for e in k8s_cluster._events)
    k8s_cluster.wait_for(lambda: running(provider, second.instance_id))


def test_a_pod_recreated_under_the_same_name_is_not_judged_by_the_deleted_pods_events(k8s, k8s_config, k8s_cluster):
    """Events outlive their pod: the FailedScaleUp of a pod deleted and made again under its name is not the new
    pod's, which waits for a node the provisioner has said nothing about yet."""
    k8s_cluster.add_node_group("spot-d", node_labels("us-east-1d", "spot"), allocatable=GPU_NODE, stocked=False)
    provider = make_provider(k8s_config)
    with pytest.raises(NoCapacity, match="FailedScaleUp"):
        launch(provider, zone="us-east-1d", token="sr-3-again")
    name = "spotrun-sr-3-again"
    k8s_cluster.wait_for(lambda: k8s_cluster.pod(NAMESPACE, name) is None)
    del k8s_cluster.node_groups["spot-d"]  # the provisioner has not spoken of the new pod
    k8s_cluster.create_pod(NAMESPACE, pod_manifest(request("us-east-1d", "sr-3-again"), provider.settings))
    k8s_cluster.wait_for(lambda: unschedulable_message(k8s_cluster.pod(NAMESPACE, name) or {}))
    seen = provider.describe(f"{NAMESPACE}/{name}")
    assert (seen.state, seen.detail.get("refusal")) == ("pending", None), seen


def test_a_spot_node_shut_down_is_a_reclaim_still_told_after_the_node_is_gone(provider, k8s_cluster, k8s_config):
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    gone = k8s_cluster.shut_down_node("spot-a", grace=0.2)
    assert gone.wait(10)
    seen = provider.describe(info.instance_id)
    assert (seen.state, seen.reclaimed) == ("terminated", True), seen
    assert seen.terminated_at is not None and "TerminationByKubelet" in seen.detail["reason"]
    assert FINALIZER in k8s_cluster.pod(NAMESPACE, "spotrun-sr-3-00aa11bb22cc33dd")["metadata"]["finalizers"]
    provider.terminate(info.instance_id)
    k8s_cluster.wait_for(lambda: k8s_cluster.pod(NAMESPACE, "spotrun-sr-3-00aa11bb22cc33dd") is None)
    assert provider.describe(info.instance_id).reclaimed, "this process let it go knowing it was reclaimed"
    other = make_provider(k8s_config).describe(info.instance_id)
    assert (other.state, other.reclaimed) == ("terminated", False)


def test_a_vanished_node_and_an_eviction_are_reclaims_but_an_on_demand_loss_is_not(provider, k8s_cluster):
    lost = launch(provider, token="sr-3-lost")
    evicted = launch(provider, zone="us-east-1b", token="sr-3-evicted")
    on_demand = launch(provider, market="on-demand", token="sr-3-od")
    for info in (lost, evicted, on_demand):
        k8s_cluster.wait_for(lambda info=info: running(provider, info.instance_id))
    k8s_cluster.delete_node("spot-a")
    provider.preempt(evicted.instance_id, notice_seconds=0)
    k8s_cluster.delete_node("od-a")
    ended = {}
    for info in (lost, evicted, on_demand):
        ended[info.instance_id] = k8s_cluster.wait_for(
            lambda info=info: (seen := provider.describe(info.instance_id)).state == "terminated" and seen)
    assert [ended[i.instance_id].reclaimed for i in (lost, evicted, on_demand)] == [True, True, False]
    assert "DeletionByPodGC" in ended[lost.instance_id].detail["reason"]
    assert "EvictionByEvictionAPI" in ended[evicted.instance_id].detail["reason"]


def test_a_spot_node_recreated_under_the_same_name_is_a_reclaim(provider, k8s_cluster):
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    k8s_cluster.age(600)  # it had run ten minutes
    k8s_cluster.recreate_node("spot-a")
    seen = k8s_cluster.wait_for(lambda: (s := provider.describe(info.instance_id)).state == "terminated" and s)
    assert seen.reclaimed, seen
    assert seen.start_failure is None


def test_a_pod_its_restarted_kubelet_refused_again_is_not_a_reclaim(provider, k8s_cluster):
    # the kubelet alone restarted, on the same Node; its device plugin had not registered again (kubernetes#124345)
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    k8s_cluster.age(600)
    k8s_cluster.restart_kubelet("spot-a", "UnexpectedAdmissionError", "Allocate failed due to no healthy devices "
                                "present; cannot allocate unhealthy devices nvidia.com/gpu, which is unexpected")
    seen = k8s_cluster.wait_for(lambda: (s := provider.describe(info.instance_id)).state == "terminated" and s)
    assert not seen.reclaimed, seen
    assert seen.start_failure.startswith("UnexpectedAdmissionError: Pod was rejected: Allocate failed")
    provider.terminate(info.instance_id)
    assert not provider.describe(info.instance_id).reclaimed


def test_a_spot_vm_replaced_under_the_same_node_object_is_a_reclaim(provider, k8s_cluster):
    # the VM taken back and made again under its name, its Node object kept: the new kubelet's boot id differs, and
    # it says so (a "Rebooted" event on the Node), then fails the pod whose containers it cannot find
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    k8s_cluster.age(600)
    k8s_cluster.reboot_node("spot-a")
    seen = k8s_cluster.wait_for(lambda: (s := provider.describe(info.instance_id)).state == "terminated" and s)
    assert seen.reclaimed, seen
    assert seen.start_failure is None
    provider.terminate(info.instance_id)
    assert provider.describe(info.instance_id).reclaimed, "this process let it go knowing it was reclaimed"


def test_a_reboot_before_the_pod_was_bound_does_not_make_a_later_kubelet_restart_a_reclaim(provider, k8s_cluster):
    k8s_cluster.reboot_node("spot-a")  # no pod on it yet
    k8s_cluster.age(600)
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    k8s_cluster.restart_kubelet("spot-a")
    seen = k8s_cluster.wait_for(lambda: (s := provider.describe(info.instance_id)).state == "terminated" and s)
    assert not seen.reclaimed, seen


def test_without_leave_to_list_node_events_a_reboot_under_a_pod_is_not_called_a_reclaim(
    provider, k8s, k8s_cluster, caplog
):
    # RBAC grants no list of events in "default", where the kubelet's Rebooted event is: as before spotrun read it
    k8s.forbid_list("events", "default")
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    k8s_cluster.age(600)
    k8s_cluster.reboot_node("spot-a")
    seen = k8s_cluster.wait_for(lambda: (s := provider.describe(info.instance_id)).state == "terminated" and s)
    assert not seen.reclaimed, seen
    assert not provider.describe(info.instance_id).reclaimed
    said = [r for r in caplog.records if "may not list events in namespace default" in r.getMessage()]
    assert len(said) == 1, "said once, not at every look"


def test_an_exited_pod_is_not_a_reclaim_and_terminate_keeps_other_finalizers(provider, k8s_cluster):
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    name = info.instance_id.split("/")[1]
    provider.api.patch_namespaced_pod(name, NAMESPACE, {"metadata": {"finalizers": [FINALIZER, "example.com/audit"]}},
                                      _content_type="application/merge-patch+json")
    k8s_cluster.exit_container(NAMESPACE, name, 0)
    seen = k8s_cluster.wait_for(lambda: (s := provider.describe(info.instance_id)).state == "terminated" and s)
    assert not seen.reclaimed and seen.detail["phase"] == "Succeeded"
    provider.terminate(info.instance_id)
    provider.terminate(info.instance_id)  # idempotent
    assert k8s_cluster.pod(NAMESPACE, name)["metadata"]["finalizers"] == ["example.com/audit"]


def test_terminate_stops_a_running_pod_and_it_goes(provider, k8s_cluster):
    info = launch(provider)
    k8s_cluster.wait_for(lambda: running(provider, info.instance_id))
    provider.terminate(info.instance_id)
    k8s_cluster.wait_for(lambda: k8s_cluster.pod(NAMESPACE, "spotrun-sr-3-00aa11bb22cc33dd") is None, timeout=10)
    assert provider.describe(info.instance_id).state == "terminated"
    provider.terminate(f"{NAMESPACE}/spotrun-never-launched")
    with pytest.raises(ValueError, match="not in this provider's namespace"):
        provider.terminate("default/spotrun-sr-3-00aa11bb22cc33dd")


def test_terminate_deletes_the_secret_the_pod_never_came_to_own(provider, k8s_cluster, monkeypatch):
    def refuse(*args, **kwargs):
        raise ApiException(status=500, reason="Internal Server Error")

    monkeypatch.setattr(provider.api, "patch_namespaced_secret", refuse)
    with pytest.raises(KubernetesApiError, match="patch secret failed"):
        launch(provider)
    found = provider.find_by_token("sr-3-00aa11bb22cc33dd")  # as the controller finds a launch it never heard of
    provider.terminate(found.instance_id)
    k8s_cluster.wait_for(lambda: k8s_cluster.pod(NAMESPACE, "spotrun-sr-3-00aa11bb22cc33dd") is None, timeout=10)
    with pytest.raises(ApiException) as missing:
        provider.api.read_namespaced_secret("spotrun-sr-3-00aa11bb22cc33dd", NAMESPACE)
    assert missing.value.status == 404
    provider.terminate(found.instance_id)  # idempotent, with both gone


def test_listing_and_finding_by_token(provider):
    first = launch(provider, token="sr-3-one")
    second = launch(provider, zone="us-east-1b", token="sr-3-two")
    assert {i.instance_id for i in provider.list_instances()} == {first.instance_id, second.instance_id}
    assert provider.find_by_token("sr-3-two").instance_id == second.instance_id
    assert provider.find_by_token("sr-3-three") is None


def test_an_unreachable_api_is_unknown_never_terminated(k8s_config):
    k8s_config.host = "http://127.0.0.1:9"  # nothing listens there
    provider = make_provider(k8s_config, call_timeout=1.0)
    assert provider.describe(f"{NAMESPACE}/spotrun-sr-3-x").state == "unknown"
    with pytest.raises(KubernetesApiError, match="create secret failed"):
        launch(provider)


def test_a_refused_token_is_an_api_error_naming_the_call(k8s, k8s_config, nodes):
    k8s_config.api_key = {"authorization": "Bearer not-the-token"}
    with pytest.raises(KubernetesApiError, match="list nodes failed: 401"):
        make_provider(k8s_config).zones(TYPE)


def test_a_resource_quota_is_a_quota_refusal():
    status = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403, "message":
              'pods "spotrun-sr-1-a" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, '
              "used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4"}
    error = ApiException(status=403, reason="Forbidden")
    error.body = json.dumps(status)
    assert isinstance(translate(error, "create pod"), QuotaExceeded)
    error.body = json.dumps({**status, "message": "pods is forbidden: User cannot create"})
    assert isinstance(translate(error, "create pod"), KubernetesApiError)


def test_the_secret_carries_the_boot_env_without_the_controllers_path(provider):
    launch(provider)
    secret = provider.api.read_namespaced_secret("spotrun-sr-3-00aa11bb22cc33dd", NAMESPACE)
    assert {key: base64.b64decode(value).decode() for key, value in secret.data.items()} == {"SPOTRUN_AGENT_CONFIG": CONFIG}


def test_the_cluster_and_token_come_from_the_kubeconfig_and_a_bad_one_is_refused(k8s, nodes, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({  # JSON is YAML: the kubeconfig as kubectl writes it
        "apiVersion": "v1", "kind": "Config", "current-context": "training",
        "clusters": [{"name": "fake", "cluster": {"server": k8s.url}}],
        "users": [{"name": "spotrun", "user": {"token": k8s.token}}],
        "contexts": [{"name": "training", "context": {"cluster": "fake", "user": "spotrun", "namespace": NAMESPACE}}],
    }))
    settings = KubernetesSettings(flavor="karpenter", namespace=NAMESPACE, kubeconfig=str(kubeconfig))
    assert KubernetesProvider(settings).zones(TYPE) == ["us-east-1a", "us-east-1b"]  # authenticated: not a 401
    with pytest.raises(ValueError, match="cannot use the kubeconfig"):
        KubernetesProvider(KubernetesSettings(flavor="karpenter", kubeconfig=str(kubeconfig), context="nowhere"))
