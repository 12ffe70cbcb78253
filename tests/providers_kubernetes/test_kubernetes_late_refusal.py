"""Cluster-autoscaler scale-ups as the controller judges them, against the fake cluster: one that began and then
failed for want of spot capacity, and one slower than the boot timeout."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from kubernetes.client.exceptions import ApiException

from spotrun.control.observe import judge_attempt
from spotrun.providers.base import LaunchRequest
from spotrun.providers.kubernetes import KubernetesProvider, KubernetesSettings

NAMESPACE = "spotrun"
TYPE = "g5.xlarge"
CONFIG = json.dumps({"job_id": 3, "token": "agent-token-3"})
GPU_NODE = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}


def node_labels(zone: str, capacity: str) -> dict[str, str]:
    return {"topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": TYPE,
            "karpenter.sh/capacity-type": capacity}


def make_provider(config, **options) -> KubernetesProvider:
    settings = {"flavor": "karpenter", "namespace": NAMESPACE, "install_command": "", "schedule_timeout": 5.0,
                "poll_interval": 0.02, "call_timeout": 5.0, **options}
    return KubernetesProvider(KubernetesSettings(**settings), configuration=config)


def launch(provider, zone="us-east-1c", market="spot", token="sr-3-00aa11bb22cc33dd", gpus=1, accelerators=None,
           config=CONFIG):
    return provider.launch(LaunchRequest(
        zone=zone, market=market, instance_type=TYPE, client_token=token,
        user_data={"argv": ["python", "-m", "spotrun.agent"], "env": {"SPOTRUN_AGENT_CONFIG": config}},
        accelerators=accelerators or ({"A10G": gpus} if gpus else None),
    ))


def judge(info, boot_timeout=120.0, after=1000.0, started_at=1.0):
    spec = {"name": "j", "run": "python train.py",
            "resources": {"cloud": "kubernetes", "instance_type": TYPE}}
    job = SimpleNamespace(spec=spec, cancel_requested=False, created_at=0.0, state="PROVISIONING")
    attempt = SimpleNamespace(state="running", reported_outcome=None, agent_started_at=None, started_at=started_at,
                              last_heartbeat_at=None, notice_at=None, exit_code=None)
    settings = SimpleNamespace(boot_timeout=boot_timeout, heartbeat_timeout=60.0, unknown_timeout=600.0)
    return judge_attempt(job, attempt, info, after, settings, 1.0)


def test_a_scale_up_that_then_fails_for_spot_capacity_is_a_refusal_not_a_loss(k8s, k8s_config, k8s_cluster):
    """cluster-autoscaler triggers a scale-up, then the cloud has no spot capacity (GCE
    ZONE_RESOURCE_POOL_EXHAUSTED, EC2 InsufficientInstanceCapacity): FailedScaleUp on the pod."""
    k8s_cluster.scale_up_delay = 60.0  # the node would take a minute to come up
    group = k8s_cluster.add_node_group("spot-c", node_labels("us-east-1c", "spot"), allocatable=GPU_NODE)
    provider = make_provider(k8s_config)
    info = launch(provider)
    assert info.state == "pending"  # the launch returned on TriggeredScaleUp
    time.sleep(1.1)  # the cloud's answer comes later (events are stamped to the second)
    with k8s_cluster.lock:  # the cloud fails the scale-up: the node never comes, the group is out of stock
        for name in list(group.nodes):
            k8s_cluster._ready_at.pop(name, None)
            k8s_cluster._nodes.pop(name, None)
        group.stocked = False
    k8s_cluster.wait_for(lambda: any(e["reason"] == "FailedScaleUp" for e in k8s_cluster._events))
    time.sleep(0.2)
    seen = provider.describe(info.instance_id)
    verdict = judge(seen)
    assert verdict.end_reason == "no_capacity"


def test_a_node_scaled_up_slower_than_the_boot_timeout_is_not_a_stuck_boot(k8s, k8s_config, k8s_cluster):
    """A GPU node pool scaled from zero may take minutes to bring its node: the wait for it is not the agent's boot.
    The attempt is taken as launched 10 minutes ago, so that the wait has lasted longer than the boot timeout."""
    k8s_cluster.scale_up_delay = 60.0  # until the checks of the wait are done
    k8s_cluster.add_node_group("spot-c", node_labels("us-east-1c", "spot"), allocatable=GPU_NODE)
    provider = make_provider(k8s_config)
    info = launch(provider)
    assert info.state == "pending"  # the launch returned on TriggeredScaleUp
    waiting = provider.describe(info.instance_id)
    assert waiting.state == "pending"
    assert judge(waiting, after=time.time() + 1, started_at=time.time() - 600) is None
    # ... but not for ever: a scale-up the autoscaler itself gives up on after 15 minutes
    assert judge(waiting, after=time.time() + 1, started_at=time.time() - 1100).end_reason == "lost"
    k8s_cluster.finish_scale_ups()
    running = k8s_cluster.wait_for(lambda: (seen := provider.describe(info.instance_id)).state == "running" and seen)
    assert judge(running, after=time.time() + 1, started_at=time.time() - 600) is None
    # the boot timeout counts from the node taking the pod
    assert judge(running, after=time.time() + 130, started_at=time.time() - 600).end_reason == "lost"


def test_a_scale_up_wait_whose_events_cannot_be_read_is_unknown_not_a_stuck_boot(k8s, k8s_config, k8s_cluster):
    """One failed listing of the pod's events, while its node is still being scaled up, answered it pending with no
    wait for capacity: the boot timeout counted from the launch, and a slow scale-up's attempt ended as lost."""
    k8s_cluster.scale_up_delay = 60.0
    k8s_cluster.add_node_group("spot-c", node_labels("us-east-1c", "spot"), allocatable=GPU_NODE)
    provider = make_provider(k8s_config)
    info = launch(provider)
    assert info.state == "pending"  # the launch returned on TriggeredScaleUp
    launched_at = time.time() - 300  # the scale-up has taken five minutes so far: past the boot timeout
    assert judge(provider.describe(info.instance_id), after=time.time() + 1, started_at=launched_at) is None

    def unreadable(*args, **kwargs):
        raise ApiException(status=500, reason="Internal Server Error")

    provider.api.list_namespaced_event = unreadable
    seen = provider.describe(info.instance_id)
    assert judge(seen, after=time.time() + 1, started_at=launched_at) is None, seen  # a failed probe says nothing
