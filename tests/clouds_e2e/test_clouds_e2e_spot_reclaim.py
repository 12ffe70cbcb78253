"""Per cloud, end to end with no network: a spot job launched through the controller on the cloud's fake, the
reclaim announced through that cloud's metadata protocol, the trainer checkpointing, the instance reclaimed, a
relaunch in another zone (past a zone refused for capacity), and the job ending with the weights of an
uninterrupted run. On AWS also: a rebalance recommendation moving the job to another zone before any interruption.

The controller is paused while the reclaim plays out (the agent API keeps answering), so the cloud has taken the
instance before the controller looks: it must then read the reclaim from the cloud's own records.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from google.auth.credentials import AnonymousCredentials
from moto import mock_aws
from moto.ec2.models import instance_types as moto_instance_types

from fakes_azure import FakeArm, FakeCredential, FakeRetailPrices, LoopbackTransport, vm_meter, vm_sku
from fakes_gcp import FakeCloud, FakeCompute, OperationError
from fakes_gcp.billing_catalog import FakeBillingCatalog, compute_sku
from spotrun.control import jobs
from spotrun.control.placement import price_for
from spotrun.costs import gcp_billing
from spotrun.costs.gcp_billing import GcpListPrices
from spotrun.providers import Provider
from spotrun.providers.aws import AwsProvider
from spotrun.providers.azure import AzureProvider, AzureSettings
from spotrun.providers.gcp import GcpProvider
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Event, Instance, Job, Store
from vm_emulation.digits import DIGITS, TRAINER_ENV
from vm_emulation.waiting import wait_until
from vm_emulation import AwsSide, AzureSide, CloudSide, ControlPlane, GcpSide, Hypervisor, ec2_repeated_terminate_keeps_reason

NOTICE_SECONDS = 10.0  # the emulated clouds' notice window (AWS gives 2 min, GCP and Azure 30 s); the trainer gets it less 2 s
STEP_SECONDS = 0.05
# The image already has spotrun (this virtualenv); the startup script's install step checks that it does.
IMAGE_CHECK = f"{shlex.quote(sys.executable)} -c 'import spotrun'"


@dataclass
class CloudWorld:
    side: CloudSide
    provider: Provider
    resources: str  # the job file's resources line
    zones: list[str]
    refuse_next_launch: Callable[[], None]  # the next launch, whatever its zone, is refused for lack of capacity
    prices: Callable[..., tuple[float, float]] = price_for


# ---- the three clouds -----------------------------------------------------------------------------------------

AWS_REGION = "us-east-1"
AWS_ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
MOTO_IMAGE_PARAMETER = "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-x86_64-gp2"


@pytest.fixture
def aws_world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[CloudWorld]:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASPOTRUNE2ETEST00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "spotrun-e2e-fake-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # moto's offering data has no p3 (the catalog's V100 type): this fake region offers it in three zones.
    offerings = moto_instance_types.INSTANCE_TYPE_OFFERINGS["availability-zone"]
    p3 = [{"InstanceType": "p3.2xlarge", "Location": zone, "LocationType": "availability-zone"} for zone in AWS_ZONES]
    monkeypatch.setitem(offerings, AWS_REGION, [*offerings.get(AWS_REGION, []), *p3])
    with mock_aws(), ec2_repeated_terminate_keeps_reason():
        session = boto3.Session(region_name=AWS_REGION)
        provider = AwsProvider(
            session=session, region=AWS_REGION, image=MOTO_IMAGE_PARAMETER, python=sys.executable,
            install_command=IMAGE_CHECK,
        )
        refused: list[str] = []
        yield CloudWorld(
            side=AwsSide(session.client("ec2")), provider=provider, zones=AWS_ZONES,
            resources="{cloud: aws, instance_type: p3.2xlarge}",
            refuse_next_launch=lambda: _refuse_next_run_instances(provider, refused),
        )


def _refuse_next_run_instances(provider: AwsProvider, refused: list[str]) -> None:
    """EC2 answers the next RunInstances with InsufficientInstanceCapacity (through botocore's before-call hook)."""

    def refuse(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if refused:
            return None
        refused.append(params["body"]["Placement.AvailabilityZone"])  # the request as serialized for EC2
        error = {"Code": "InsufficientInstanceCapacity", "Message": "There is no Spot capacity available that matches your request."}
        return AWSResponse("https://ec2.test", 400, {}, None), {"Error": error}

    provider.ec2.meta.events.register("before-call.ec2.RunInstances", refuse)


GCP_PROJECT = "spotrun-e2e"
GCP_ZONES = ["us-central1-a", "us-central1-b", "us-central1-f"]


GCP_REGION = "us-central1"
# Compute Engine's SKUs for an N1 machine with a T4 attached, which spotrun's catalog does not price: on-demand and
# Spot, $ per vCPU-hour, GiB-hour and GPU-hour
GCP_SKUS = [
    compute_sku("N1 Predefined Instance Core running in Americas", 0.031611, [GCP_REGION]),
    compute_sku("N1 Predefined Instance Ram running in Americas", 0.004237, [GCP_REGION], unit="GiBy.h"),
    compute_sku("Nvidia Tesla T4 GPU running in Americas", 0.35, [GCP_REGION], resource_group="GPU"),
    compute_sku("Spot Preemptible N1 Predefined Instance Core running in Americas", 0.00698, [GCP_REGION],
                usage_type="Preemptible"),
    compute_sku("Spot Preemptible N1 Predefined Instance Ram running in Americas", 0.000935, [GCP_REGION],
                usage_type="Preemptible", unit="GiBy.h"),
    compute_sku("Spot Preemptible Nvidia Tesla T4 GPU running in Americas", 0.14, [GCP_REGION],
                usage_type="Preemptible", resource_group="GPU"),
]


@pytest.fixture
def gcp_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudWorld]:
    fake = FakeCloud(
        project=GCP_PROJECT, zones={zone: "UP" for zone in GCP_ZONES},
        machine_types={zone: {"n1-standard-8"} for zone in GCP_ZONES},
        accelerator_types={zone: {"nvidia-tesla-t4": 4} for zone in GCP_ZONES},
    )
    with FakeCompute(fake) as compute, FakeBillingCatalog(GCP_SKUS) as billing:
        # priced as GCP's billing catalog lists the machine's parts (faked); a job not yet placed in the region
        monkeypatch.setattr(gcp_billing, "LIST_PRICES", GcpListPrices(
            credentials=AnonymousCredentials(), project=GCP_PROJECT, billing_options={"api_endpoint": billing.url},
            compute_options={"api_endpoint": compute.url},
        ))
        monkeypatch.setenv("SPOTRUN_GCP_REGION", GCP_REGION)
        provider = GcpProvider(
            credentials=AnonymousCredentials(), client_options={"api_endpoint": compute.url},
            project=GCP_PROJECT, call_timeout=5.0, poll_interval=0.01, operation_timeout=10.0,
            python=sys.executable, install_command=IMAGE_CHECK,
        )
        world = CloudWorld(
            side=GcpSide(fake), provider=provider, zones=GCP_ZONES,
            resources="{cloud: gcp, instance_type: n1-standard-8, accelerators: {T4: 1}}",
            refuse_next_launch=lambda: fake.fail_next_insert_operation(
                OperationError("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources available.")
            ),
        )
        yield world


AZURE_SUBSCRIPTION = "8f0c2d4e-1a3b-4c5d-9e7f-0123456789ab"
AZURE_GROUP = "spotrun-e2e"
AZURE_LOCATION = "eastus"
AZURE_SIZE = "Standard_NC6s_v3"
AZURE_SUBNET = (
    f"/subscriptions/{AZURE_SUBSCRIPTION}/resourceGroups/{AZURE_GROUP}/providers/Microsoft.Network/"
    "virtualNetworks/spotrun-vnet/subnets/default"
)
@pytest.fixture
def azure_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudWorld]:
    # priced as Azure lists the size (its Retail Prices API, faked): a 1×V100 size, on-demand and Spot
    meters = [vm_meter(AZURE_SIZE, AZURE_LOCATION, 3.06), vm_meter(AZURE_SIZE, AZURE_LOCATION, 0.92, spot=True)]
    with FakeArm(AZURE_SUBSCRIPTION, AZURE_LOCATION) as arm, FakeRetailPrices(meters) as retail:
        monkeypatch.setenv("SPOTRUN_AZURE_PRICES_URL", retail.url)
        monkeypatch.setenv("SPOTRUN_AZURE_LOCATION", AZURE_LOCATION)  # where a job not yet placed is priced
        arm.skus = [vm_sku(AZURE_SIZE, AZURE_LOCATION, ["1", "2", "3"])]
        settings = AzureSettings(
            subscription_id=AZURE_SUBSCRIPTION, resource_group=AZURE_GROUP, location=AZURE_LOCATION,
            subnet_id=AZURE_SUBNET, ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eSpotrunKey spotrun@e2e",
            launch_wait=10.0, poll_interval=0.01, python=sys.executable, install_command=IMAGE_CHECK,
        )
        provider = AzureProvider(
            settings, credential=FakeCredential(),
            client_options={"transport": LoopbackTransport(arm.url), "retry_backoff_factor": 0.01},
        )
        yield CloudWorld(
            side=AzureSide(arm), provider=provider, zones=[f"{AZURE_LOCATION}-{n}" for n in (1, 2, 3)],
            resources=f"{{cloud: azure, instance_type: {AZURE_SIZE}}}",
            refuse_next_launch=lambda: arm.fail_next_allocation(
                "ZonalAllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone."
            ),
        )


# ---- the scenario ---------------------------------------------------------------------------------------------



def job_text(world: CloudWorld, spot_extra: str = "") -> str:
    env = {**TRAINER_ENV, "STEP_SECONDS": str(STEP_SECONDS)}
    return f"""
name: digits-{world.side.cloud}
workdir: {DIGITS}
run: python train.py
env: {json.dumps(env)}
resources: {world.resources}
spot: {{zones: {json.dumps(world.zones)}, preemptions_before_fallback: 3{spot_extra}}}
checkpoint: {{sync_interval: 1s}}
"""


def attempts_of(store: Store, job_id: int) -> list[Attempt]:
    with store.session() as session:
        job = session.get(Job, job_id)
        return sorted(job.attempts, key=lambda a: a.number)


def job_of(store: Store, job_id: int) -> Job:
    with store.session() as session:
        return session.get(Job, job_id)


def checkpointing_attempt(store: Store, job_id: int) -> Attempt | None:
    attempts = attempts_of(store, job_id)
    first = attempts[0] if attempts else None
    if first and first.state == "running" and first.checkpoint_step is not None:
        return first
    return None


@dataclass
class EmulatedRun:
    job_id: int
    plane: ControlPlane
    hypervisor: Hypervisor
    explain: Callable[[], str]  # the job, its attempts, boot errors and each VM's log: for a failed assertion


@contextmanager
def job_on_emulated_cloud(world: CloudWorld, store: Store, tmp_path: Path, spot_extra: str = "") -> Iterator[EmulatedRun]:
    """The digits job submitted, a control plane driving it and a hypervisor booting its instances, until the end."""
    job_id = jobs.submit(store, parse_spec(job_text(world, spot_extra)), time.time(), prices=world.prices)
    plane = ControlPlane(
        store, {world.side.cloud: world.provider}.__getitem__, prices=world.prices,
        heartbeat_timeout=20, boot_timeout=60, agent_heartbeat_interval=0.3, backoff_base=1,
    )
    with Hypervisor(world.side, tmp_path / "vms") as hypervisor, plane:

        def explain() -> str:
            rows = [(a.number, a.zone, a.state, a.end_reason, a.instance_id, a.checkpoint_step, a.warning, a.standby_for)
                    for a in attempts_of(store, job_id)]
            logs = "\n".join(f"== {i}\n{vm.log_tail()}" for i, vm in hypervisor.vms.items())
            with store.session() as session:
                events = "\n".join(f"{e.at:.2f} {e.attempt_id} {e.kind}: {e.message}" for e in session.query(Event)
                                   .filter(Event.job_id == job_id).order_by(Event.id))
            return (f"job {job_of(store, job_id).state}; attempts {rows}; boot errors {hypervisor.errors}\n"
                    f"events:\n{events}\n{logs}")

        yield EmulatedRun(job_id, plane, hypervisor, explain)


def run_spot_reclaim(
    world: CloudWorld, store: Store, tmp_path: Path, home: Path, uninterrupted: Callable[[], Future[dict]],
) -> None:
    with job_on_emulated_cloud(world, store, tmp_path) as run:
        job_id, plane, hypervisor, explain = run.job_id, run.plane, run.hypervisor, run.explain
        first = wait_until("the trainer's first checkpoint", lambda: checkpointing_attempt(store, job_id), 40, explain)
        world.refuse_next_launch()
        with plane.paused():
            uninterrupted()  # starts it: it trains while the window passes, the controller paused
            hypervisor.reclaim(first.instance_id, NOTICE_SECONDS)
            # The controller has not looked yet: the agent alone reported the notice and the trainer's exit.
            seen = attempts_of(store, job_id)[0]
            assert seen.notice_source == world.side.notice_source, explain()
            assert seen.reported_outcome == "preempted" and seen.exit_code == 75, explain()
            assert seen.state == "running"

        wait_until("the job's end", lambda: job_of(store, job_id).state in ("SUCCEEDED", "FAILED"), 60, explain)
        wait_until("every VM switched off", lambda: hypervisor.live_processes() == 0, 15, explain)
        assert not plane.tick_errors and not hypervisor.errors, explain()
        last_vm = hypervisor.vm(attempts_of(store, job_id)[-1].instance_id)
        resumed_log = last_vm.agent_log.read_text()

    job = job_of(store, job_id)
    assert job.state == "SUCCEEDED", explain()
    assert (job.preemptions, job.restarts_on_error) == (1, 0)
    reclaimed, refused, finished = attempts_of(store, job_id)
    assert (reclaimed.end_reason, refused.end_reason, finished.end_reason) == ("preempted", "no_capacity", "succeeded")
    assert all(a.market == "spot" for a in (reclaimed, refused, finished))
    assert refused.instance_id is None
    assert finished.zone not in (reclaimed.zone, refused.zone), "the relaunch went back to a zone it lost or was refused"
    assert finished.instance_id != reclaimed.instance_id
    # billed as the cloud charges: EC2 nothing for an instance it took back in its first hour, GCE and Azure a minute
    # at least, every cloud at least a minute for the instance that finished
    expected = 0.0 if world.side.cloud == "aws" else max(reclaimed.billed_seconds, 60.0)
    assert reclaimed.billed_seconds > 0 and reclaimed.charged_seconds == expected
    assert finished.charged_seconds == max(finished.billed_seconds, 60.0)
    with store.session() as session:
        lost_instance = session.get(Instance, reclaimed.instance_id)
        assert lost_instance.reclaimed, "the controller did not read the cloud's reclaim of the instance"
        assert lost_instance.state == "terminated"
        assert session.get(Instance, finished.instance_id).reclaimed is False
    start = re.search(r"starting at step (\d+) of", resumed_log)
    assert start and int(start.group(1)) >= first.checkpoint_step > 0, f"the relaunch did not resume:\n{resumed_log[-2000:]}"

    final = json.loads((home / "checkpoints" / f"{job_id}-digits-{world.side.cloud}" / "final.json").read_text())
    reference = uninterrupted().result()
    assert final["sha256"] == reference["sha256"]
    assert final["steps"] == reference["steps"]


# A soak run (`make soak`, ~30 s): AWS runs end to end in the rebalance test below, GCP and Azure through this
# same run_spot_reclaim, and the agent reads IMDS's interruption notice in tests/agent_cloud_notices
@pytest.mark.soak
def test_aws_spot_reclaim_through_imds(aws_world, cloud_store, tmp_path, spotrun_home, uninterrupted_digits):
    run_spot_reclaim(aws_world, cloud_store, tmp_path, spotrun_home, uninterrupted_digits)


def test_gcp_spot_preemption_through_metadata_server(gcp_world, cloud_store, tmp_path, spotrun_home, uninterrupted_digits):
    run_spot_reclaim(gcp_world, cloud_store, tmp_path, spotrun_home, uninterrupted_digits)
    # the job named no prices, nor does the catalog list a T4: each attempt is billed at the billing catalog's rates
    with cloud_store.session() as session:
        [prices] = {(a.price_per_hour, a.on_demand_price_per_hour) for a in session.query(Attempt)}
    assert prices == pytest.approx((8 * 0.00698 + 30 * 0.000935 + 0.14, 8 * 0.031611 + 30 * 0.004237 + 0.35))


# A soak run (`make soak`, ~26 s): GCP runs this same run_spot_reclaim in the suite, the agent reads Azure's
# Scheduled Events in tests/agent_cloud_notices, and the provider and its retail prices are tested in
# tests/providers_azure and tests/costs
@pytest.mark.soak
def test_azure_spot_eviction_through_scheduled_events(azure_world, cloud_store, tmp_path, spotrun_home, uninterrupted_digits):
    run_spot_reclaim(azure_world, cloud_store, tmp_path, spotrun_home, uninterrupted_digits)
    # the job named no prices: each attempt is billed as Azure's retail prices list the size there
    with cloud_store.session() as session:
        prices = {(a.price_per_hour, a.on_demand_price_per_hour) for a in session.query(Attempt)}
    assert prices == {(0.92, 3.06)}


def test_aws_rebalance_recommendation_moves_the_job_before_an_interruption(
    aws_world, cloud_store, tmp_path, spotrun_home, uninterrupted_digits,
):
    world, store = aws_world, cloud_store
    with job_on_emulated_cloud(world, store, tmp_path, ", on_rebalance: move") as run:
        job_id, plane, hypervisor, explain = run.job_id, run.plane, run.hypervisor, run.explain
        first = wait_until("the trainer's first checkpoint", lambda: checkpointing_attempt(store, job_id), 40, explain)
        hypervisor.recommend_rebalance(first.instance_id)
        wait_until("the job's end", lambda: job_of(store, job_id).state in ("SUCCEEDED", "FAILED"), 60, explain)
        assert not plane.tick_errors and not hypervisor.errors, explain()

    job = job_of(store, job_id)
    assert job.state == "SUCCEEDED" and job.preemptions == 0, explain()
    assert len(attempts_of(store, job_id)) == 2, explain()
    warned, moved = attempts_of(store, job_id)
    assert warned.warning == "aws-imds/rebalance" and warned.notice_at is not None and warned.end_reason == "migrated"
    assert (moved.standby_for, moved.market, moved.end_reason) == (warned.id, "spot", "succeeded")
    assert moved.zone != warned.zone
    final = json.loads((spotrun_home / "checkpoints" / f"{job_id}-digits-aws" / "final.json").read_text())
    assert final["sha256"] == uninterrupted_digits().result()["sha256"]
