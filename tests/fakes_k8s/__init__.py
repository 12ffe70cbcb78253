"""A fake Kubernetes cluster for tests: a real HTTP server on 127.0.0.1 (random port) speaking core/v1 JSON.

    with FakeKubernetes(FakeCluster(runner=ProcessRunner(tmp_path))) as k8s:
        config = kubernetes.client.Configuration(host=k8s.url, api_key={"authorization": k8s.token},
                                                 api_key_prefix={"authorization": "Bearer"})
        k8s.cluster.add_node("spot-1", labels={"karpenter.sh/capacity-type": "spot"}, allocatable={...})

It serves nodes (list, get), pods (create, list, get, delete, merge-patch, eviction, log), secrets (create, list,
get, delete, merge-patch) and events (list), with label and field selectors, Status errors, bearer-token auth and
lists the token may not make (`forbid_list`, RBAC's 403). Behind it run a scheduler (node selectors, required node
affinity, taints, cpu/memory/extended resources), an optional autoscaler (`add_node_group`), a kubelet whose
containers a runner runs (`IdleRunner`, `ProcessRunner`), graceful deletion with finalizers, owner-reference GC of
secrets, node loss (`shut_down_node`, `delete_node`, `recreate_node`, `reboot_node`), a kubelet restart
(`restart_kubelet`) and time passing (`age`).

Tests run with --import-mode=importlib, so a conftest that wants this package puts tests/ on sys.path:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    from fakes_k8s import FakeKubernetes
"""

from .cluster import SHUTDOWN_MESSAGE, ApiError, FakeCluster, NodeGroup
from .runner import POD_MARKER_ENV, ContainerConfigError, IdleRunner, ProcessRunner, Runner
from .server import FakeKubernetes

__all__ = ["POD_MARKER_ENV", "SHUTDOWN_MESSAGE", "ApiError", "ContainerConfigError", "FakeCluster", "FakeKubernetes",
           "IdleRunner", "NodeGroup", "ProcessRunner", "Runner"]
