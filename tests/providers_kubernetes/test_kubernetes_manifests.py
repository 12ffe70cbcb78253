"""The pod and secret of a launch, and the settings behind them: which nodes a pod selects for each flavor and
market, what it tolerates, that the agent's token stays out of the pod, and the settings' errors."""

from __future__ import annotations

import json

import pytest
from fakes_k8s.selectors import untolerated_taint

from spotrun.costs.catalog import UnknownPrice
from spotrun.costs.market_prices import catalog_prices
from spotrun.providers.base import LaunchRequest
from spotrun.providers.kubernetes import KubernetesSettings
from spotrun.providers.kubernetes.body import pod_manifest, pod_script, secret_manifest
from spotrun.providers.kubernetes.naming import FINALIZER, label_value, parse_instance_id, pod_name

CONFIG = json.dumps({"job_id": 7, "token": "agent-secret-token"})
USER_DATA = {"argv": ["/usr/bin/python3", "-m", "spotrun.agent"], "env": {"SPOTRUN_AGENT_CONFIG": CONFIG, "PATH": "/x"}}


def request(market: str = "spot", accelerators: dict[str, int] | None = None, instance_type: str = "g4dn.xlarge") -> LaunchRequest:
    return LaunchRequest(
        zone="us-east-1a", market=market, instance_type=instance_type, client_token="sr-7-0123456789abcdef",
        user_data=USER_DATA, accelerators=accelerators,
    )


def affinity_terms(pod: dict) -> list:
    return pod["spec"].get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])


def test_a_karpenter_spot_pod_selects_zone_type_and_capacity_type_and_keeps_the_token_in_its_secret():
    settings = KubernetesSettings(flavor="karpenter", image="ghcr.io/acme/train:1", install_command="")
    pod = pod_manifest(request(), settings)
    assert pod["metadata"]["name"] == "spotrun-sr-7-0123456789abcdef"
    assert pod["metadata"]["finalizers"] == [FINALIZER]
    assert pod["metadata"]["labels"]["spotrun.dev/job"] == "7"
    assert pod["spec"]["nodeSelector"] == {
        "topology.kubernetes.io/zone": "us-east-1a", "node.kubernetes.io/instance-type": "g4dn.xlarge",
        "karpenter.sh/capacity-type": "spot",
    }
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["tolerations"] == []
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["shareProcessNamespace"] is True, "the pause process, not the agent, reaps orphans as PID 1"
    [container] = pod["spec"]["containers"]
    assert container["image"] == "ghcr.io/acme/train:1"
    assert container["envFrom"] == [{"secretRef": {"name": pod["metadata"]["name"]}}]
    assert "agent-secret-token" not in json.dumps(pod), "the agent's token must not be readable in the pod spec"
    script = container["command"][2]
    assert script.rstrip().endswith("exec python -m spotrun.agent"), "the agent is the container's PID 1, logging to stdout"
    secret = secret_manifest(request(), "default")
    assert secret["stringData"] == {"SPOTRUN_AGENT_CONFIG": CONFIG}, "PATH is the controller's, not the image's"


def test_on_demand_pods_select_nodes_without_the_spot_value_where_the_flavor_labels_only_spot():
    """On GKE, nor on the older preemptible node pools, which GKE takes back as it does spot nodes."""
    gke = KubernetesSettings(flavor="gke")
    pod = pod_manifest(request("on-demand", instance_type="n1-standard-8"), gke)
    assert "cloud.google.com/gke-spot" not in pod["spec"]["nodeSelector"]
    assert affinity_terms(pod) == [{"matchExpressions": [
        {"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]},
        {"key": "cloud.google.com/gke-preemptible", "operator": "NotIn", "values": ["true"]}]}]
    assert pod["spec"]["tolerations"] == []
    eks = pod_manifest(request("on-demand"), KubernetesSettings(flavor="eks"))
    assert eks["spec"]["nodeSelector"]["eks.amazonaws.com/capacityType"] == "ON_DEMAND" and not affinity_terms(eks)


def test_gke_spot_gpus_select_the_accelerator_and_tolerate_spot_and_gpu_taints():
    pod = pod_manifest(request(accelerators={"T4": 2}, instance_type="n1-standard-8"), KubernetesSettings(flavor="gke"))
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert {(t["key"], t["operator"]) for t in pod["spec"]["tolerations"]} == {
        ("cloud.google.com/gke-spot", "Equal"), ("nvidia.com/gpu", "Exists")}
    with pytest.raises(ValueError, match="one GPU model"):
        pod_manifest(request(accelerators={"T4": 1, "L4": 1}), KubernetesSettings(flavor="gke"))


def test_aks_gpu_pods_tolerate_the_gpu_node_pools_sku_taint_and_cpu_pods_do_not():
    """AKS's GPU guide has GPU node pools made with the taint sku=gpu:NoSchedule: a GPU pod must tolerate it."""
    aks, gpu_type = KubernetesSettings(flavor="aks"), "Standard_NC24ads_A100_v4"
    sku_taint = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
    spot_taint = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
    spot_pod = pod_manifest(request("spot", {"A100": 1}, gpu_type), aks)
    on_demand_pod = pod_manifest(request("on-demand", {"A100": 1}, gpu_type), aks)
    assert untolerated_taint(spot_pod, {"spec": {"taints": [spot_taint, sku_taint]}}) is None
    assert untolerated_taint(on_demand_pod, {"spec": {"taints": [sku_taint]}}) is None
    cpu_pod = pod_manifest(request("spot", instance_type="Standard_D8s_v5"), aks)
    assert untolerated_taint(cpu_pod, {"spec": {"taints": [spot_taint, sku_taint]}}) == sku_taint


def test_custom_labels_requests_and_service_account():
    settings = KubernetesSettings(
        market_label="example.com/lifecycle", spot_value="preemptible", spot_taint="example.com/lifecycle=preemptible",
        node_selector=(("pool", "training"),), cpu="7", memory="28Gi", service_account="trainer",
        metadata_notices="aws", termination_grace=90.5,
    )
    pod = pod_manifest(request(), settings)
    assert pod["spec"]["nodeSelector"]["example.com/lifecycle"] == "preemptible"
    assert pod["spec"]["nodeSelector"]["pool"] == "training"
    assert pod["spec"]["tolerations"][0]["key"] == "example.com/lifecycle"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 91
    assert pod["spec"]["serviceAccountName"] == "trainer" and pod["spec"]["automountServiceAccountToken"] is True
    container = pod["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "7", "memory": "28Gi"}}
    assert {"name": "SPOTRUN_CLOUD", "value": "aws"} in container["env"]
    on_demand = pod_manifest(request("on-demand"), settings)
    assert affinity_terms(on_demand)[0]["matchExpressions"][0]["operator"] == "NotIn"


def test_the_default_install_puts_this_spotrun_into_the_image_python():
    script = pod_script(USER_DATA, KubernetesSettings(flavor="aks", python="/opt/py/bin/python"))
    assert "/opt/py/bin/python -m pip install" in script and "'spotrun==" in script
    assert "exec /opt/py/bin/python -m spotrun.agent" in script


@pytest.mark.parametrize("options, error", [
    ({}, "SPOTRUN_KUBERNETES_FLAVOR"),
    ({"flavor": "openshift"}, "unknown Kubernetes flavor 'openshift'"),
    ({"market_label": "lifecycle"}, "SPOT_VALUE"),
    ({"flavor": "eks", "namespace": "Team_A"}, "namespace must be a DNS label"),
    ({"flavor": "eks", "cpu": "lots"}, "cpu must be a Kubernetes quantity"),
    ({"flavor": "eks", "spot_taint": "novalue"}, "spot_taint must be KEY=VALUE"),
    ({"flavor": "eks", "schedule_timeout": 0}, "schedule_timeout must be > 0"),
    ({"flavor": "eks", "metadata_notices": "ibm"}, "metadata_notices must be aws, gcp or azure"),
])
def test_bad_settings_are_refused_naming_what_is_wrong(options, error):
    with pytest.raises(ValueError, match=error):
        KubernetesSettings(**options)


@pytest.mark.parametrize("quantity", ["4", "500m", "1.5", "0.5", ".5", "2.", "1e3", "1E3", "1e-3", "+2", "2Ki", "28Gi",
                                      "1Pi", "1Ei", "1E", "2k", "100M", "250u", "9n"])
def test_every_kubernetes_quantity_is_taken_for_cpu_and_memory(quantity):
    settings = KubernetesSettings(flavor="eks", cpu=quantity, memory=quantity)
    requests = pod_manifest(request(), settings)["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": quantity, "memory": quantity}


@pytest.mark.parametrize("quantity", ["lots", "", " 4", "4 ", "-1", "1.5.2", "1Ki2", "1ki", "1KB", "1e", "1e3m",
                                      "1e1.5", "1_000", "NaN", "Infinity", "\uff11", "0x10", 4])
def test_a_value_that_is_no_kubernetes_quantity_is_refused_naming_the_field(quantity):
    for field in ("cpu", "memory"):
        with pytest.raises(ValueError) as refused:
            KubernetesSettings(flavor="eks", **{field: quantity})
        assert str(refused.value).startswith(f"{field} must be a Kubernetes quantity"), refused.value
        assert str(refused.value).endswith(f"got {quantity!r}"), refused.value


def test_settings_from_the_environment():
    settings = KubernetesSettings.from_env({
        "SPOTRUN_KUBERNETES_FLAVOR": "gke", "SPOTRUN_KUBERNETES_ZONES": "us-central1-a, us-central1-b",
        "SPOTRUN_KUBERNETES_NODE_SELECTOR": "pool=a100,team=ml", "SPOTRUN_KUBERNETES_SCHEDULE_TIMEOUT": "30",
    }, namespace="ml")
    assert settings.zones == ("us-central1-a", "us-central1-b")
    assert settings.node_selector == (("pool", "a100"), ("team", "ml"))
    assert (settings.schedule_timeout, settings.namespace) == (30.0, "ml")
    with pytest.raises(ValueError, match="SPOTRUN_KUBERNETES_SCHEDULE_TIMEOUT must be a number"):
        KubernetesSettings.from_env({"SPOTRUN_KUBERNETES_FLAVOR": "gke", "SPOTRUN_KUBERNETES_SCHEDULE_TIMEOUT": "soon"})
    with pytest.raises(TypeError, match="unknown Kubernetes provider option"):
        KubernetesSettings.from_env({}, flavour="gke")


def test_names_from_client_tokens():
    assert pod_name("sr-1-abc") == "spotrun-sr-1-abc"
    long = pod_name("Sr_" + "x" * 80)
    assert long.startswith("spotrun-") and len(long) <= 63 and long == pod_name("Sr_" + "x" * 80)
    assert label_value("sr-1-abc") == "sr-1-abc" and label_value("a/b").startswith("h-")
    assert parse_instance_id("ml/spotrun-sr-1-abc") == ("ml", "spotrun-sr-1-abc")
    with pytest.raises(ValueError, match="not a Kubernetes instance id"):
        parse_instance_id("i-0123")


def test_a_kubernetes_job_is_priced_as_its_nodes_cloud(monkeypatch):
    monkeypatch.delenv("SPOTRUN_KUBERNETES_FLAVOR", raising=False)
    monkeypatch.delenv("SPOTRUN_KUBERNETES_NODES_CLOUD", raising=False)
    with pytest.raises(UnknownPrice, match="SPOTRUN_KUBERNETES_FLAVOR or SPOTRUN_KUBERNETES_NODES_CLOUD"):
        catalog_prices("kubernetes", "p3.2xlarge", "spot", None)
    monkeypatch.setenv("SPOTRUN_KUBERNETES_FLAVOR", "karpenter")
    assert catalog_prices("kubernetes", "p3.2xlarge", "spot", None) == catalog_prices("aws", "p3.2xlarge", "spot", None)
    monkeypatch.setenv("SPOTRUN_KUBERNETES_NODES_CLOUD", "gcp")  # the variable wins over the flavor's cloud
    assert catalog_prices("kubernetes", "n1-standard-8", "on-demand", None) == catalog_prices(
        "gcp", "n1-standard-8", "on-demand", None)
    monkeypatch.setenv("SPOTRUN_KUBERNETES_NODES_CLOUD", "oracle")
    with pytest.raises(UnknownPrice, match="must be one of aws, gcp, azure"):
        catalog_prices("kubernetes", "p3.2xlarge", "spot", None)
