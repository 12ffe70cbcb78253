"""A pod whose bootstrap fails before the agent starts (no spotrun in the image and no PyPI from the pod, or a
wrong python) ends Failed at once: the controller read it as 'lost' and placed the job again, for ever."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kubernetes import client

from fakes_k8s import FakeCluster, FakeKubernetes, ProcessRunner
from spotrun.control import jobs
from spotrun.control.placement import price_for
from spotrun.providers.kubernetes import KubernetesProvider, KubernetesSettings
from spotrun.spec import parse_spec
from spotrun.state import Job
from vm_emulation import ControlPlane
from vm_emulation.waiting import wait_until

NAMESPACE = "training"
TYPE = "p3.2xlarge"
ZONE = "us-east-1a"


def test_a_bootstrap_that_exits_before_the_agent_fails_the_job(tmp_path: Path, monkeypatch, cloud_store):
    monkeypatch.setenv("SPOTRUN_KUBERNETES_FLAVOR", "karpenter")
    runner = ProcessRunner(tmp_path / "pods", {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})
    fake = FakeCluster(namespaces=(NAMESPACE,), runner=runner)
    labels = {"topology.kubernetes.io/zone": ZONE, "node.kubernetes.io/instance-type": TYPE,
              "karpenter.sh/capacity-type": "spot"}
    fake.add_node("spot-a", labels, allocatable={"cpu": "8", "memory": "61Gi", "nvidia.com/gpu": "1"})
    with FakeKubernetes(fake) as k8s:
        settings = KubernetesSettings(
            flavor="karpenter", namespace=NAMESPACE, python=sys.executable,
            install_command="echo 'pip: no route to pypi.org' >&2; exit 1",  # as a pip install without egress
            schedule_timeout=1.0, poll_interval=0.05, call_timeout=5.0, zones=(ZONE,),
        )
        configuration = client.Configuration(host=k8s.url, api_key={"authorization": f"Bearer {k8s.token}"})
        provider = KubernetesProvider(settings, configuration=configuration)
        spec = parse_spec(f"""
name: broken-bootstrap
run: python -c 'print(1)'
resources: {{cloud: kubernetes, instance_type: {TYPE}, accelerators: {{V100: 1}}}}
spot: {{zones: ["{ZONE}"]}}
max_restarts_on_error: 1
""")
        job_id = jobs.submit(cloud_store, spec, time.time(), prices=price_for)
        plane = ControlPlane(cloud_store, {"kubernetes": provider}.__getitem__, prices=price_for, heartbeat_timeout=20,
                             boot_timeout=60, agent_heartbeat_interval=0.3, backoff_base=1)

        def attempts():
            with cloud_store.session() as session:
                job = session.get(Job, job_id)
                return job.state, [(a.number, a.end_reason) for a in sorted(job.attempts, key=lambda a: a.number)]

        with plane:
            wait_until("the job's end", lambda: attempts()[0] in ("FAILED", "SUCCEEDED", "CANCELLED"), 25,
                       lambda: f"{attempts()} tick errors {plane.tick_errors}")
        assert attempts() == ("FAILED", [(1, "failed"), (2, "failed")])
        assert not fake.errors
