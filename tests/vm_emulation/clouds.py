"""What the emulator needs from each cloud fake: which instances run, the startup script each was given, a
metadata service per instance that speaks the cloud's notice protocol, and the cloud's own way to reclaim one.

- AWS: moto (in-process, under `mock_aws`); user data read back with DescribeInstanceAttribute; IMDSv2
  `spot/instance-action`; the reclaim is EC2's termination with state reason Server.SpotInstanceTermination.
- GCP: `tests/fakes_gcp.FakeCloud`; the `startup-script` metadata item; `instance/preempted`; the reclaim is a
  compute.instances.preempted operation.
- Azure: `tests/fakes_azure.FakeArm`; the custom data of the create request (Azure never returns it); a
  Preempt scheduled event; the reclaim is an eviction.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from fakes import FakeAzureEvents, FakeGceMetadata, FakeImds
from fakes.metadata_server import FakeMetadataServer


@dataclass(frozen=True)
class Boot:
    """What a new instance boots with."""

    instance_id: str
    zone: str
    startup_script: str


class NoticeChannel(Protocol):
    """One instance's metadata service."""

    env: dict[str, str]  # what points the agent at it

    def announce(self, notice_seconds: float) -> None: ...

    def close(self) -> None: ...


class CloudSide(Protocol):
    cloud: str  # aws | gcp | azure, as the job's resources.cloud names it
    notice_source: str  # the agent's name for the cloud's notice source

    def running(self) -> set[str]: ...

    def boot_of(self, instance_id: str) -> Boot: ...

    def notice_channel(self, instance_id: str) -> NoticeChannel: ...

    def reclaim(self, instance_id: str) -> None: ...


@dataclass
class _Channel:
    server: FakeMetadataServer
    env: dict[str, str]

    def close(self) -> None:
        self.server.close()


# ---- AWS ------------------------------------------------------------------------------------------------------


class _ImdsChannel(_Channel):
    def announce(self, notice_seconds: float) -> None:
        self.server.announce_interruption("terminate", reclaim_after=notice_seconds)  # type: ignore[attr-defined]


class AwsSide:
    """EC2 as moto runs it in-process; `ec2` is a boto3 EC2 client of the same region (made under mock_aws)."""

    cloud = "aws"
    notice_source = "aws-imds"

    def __init__(self, ec2: Any) -> None:
        self.ec2 = ec2
        self.region = ec2.meta.region_name

    def running(self) -> set[str]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["running"]}]
        )
        return {raw["InstanceId"] for page in pages for r in page["Reservations"] for raw in r["Instances"]}

    def boot_of(self, instance_id: str) -> Boot:
        encoded = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
        [reservation] = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        zone = reservation["Instances"][0]["Placement"]["AvailabilityZone"]
        return Boot(instance_id, zone, base64.b64decode(encoded).decode())

    def notice_channel(self, instance_id: str) -> NoticeChannel:
        imds = FakeImds()
        return _ImdsChannel(imds, {"SPOTRUN_AWS_METADATA_URL": imds.url})

    def reclaim(self, instance_id: str) -> None:
        """EC2 takes the spot instance back; no API call does this, so it is written into moto's backend."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        instance = ec2_backends[DEFAULT_ACCOUNT_ID][self.region].get_instance(instance_id)
        instance.terminate()
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        instance._reason = f"Service initiated ({now} GMT)"
        instance.state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination", "Server.SpotInstanceTermination"
        )


@contextmanager
def ec2_repeated_terminate_keeps_reason() -> Iterator[None]:
    """Within: moto, like EC2, leaves an instance that is already terminated as it is when it is terminated again.

    moto (5.x) terminates it anew and overwrites its state reason with Client.UserInitiatedShutdown, which would
    erase a spot reclaim the moment the controller cleans up after it; EC2 keeps the reason of the first end.
    """
    from moto.ec2.models.instances import Instance

    terminate = Instance.terminate

    def terminate_unless_terminated(instance: Instance) -> Any:
        if instance._state.name == "terminated":
            return copy.copy(instance._state)
        return terminate(instance)

    Instance.terminate = terminate_unless_terminated  # type: ignore[method-assign]
    try:
        yield
    finally:
        Instance.terminate = terminate  # type: ignore[method-assign]


# ---- GCP ------------------------------------------------------------------------------------------------------


class _GceChannel(_Channel):
    def announce(self, notice_seconds: float) -> None:
        # GCE's notice is its own 30 s (the agent assumes that); the emulator's clock only ends the VM sooner.
        self.server.preempt()  # type: ignore[attr-defined]


class GcpSide:
    """Compute Engine as `tests/fakes_gcp.FakeCloud` keeps it; instance ids are ZONE/NAME, as the provider's."""

    cloud = "gcp"
    notice_source = "gcp-metadata"

    def __init__(self, fake_cloud: Any) -> None:
        self.fake = fake_cloud

    def running(self) -> set[str]:
        with self.fake.lock:
            return {f"{zone}/{name}" for (zone, name), i in self.fake.instances.items() if i["status"] == "RUNNING"}

    def boot_of(self, instance_id: str) -> Boot:
        zone, name = instance_id.split("/", 1)
        instance = self.fake.get_instance(zone, name)
        items = {item["key"]: item["value"] for item in instance.get("metadata", {}).get("items", [])}
        return Boot(instance_id, zone, items["startup-script"])

    def notice_channel(self, instance_id: str) -> NoticeChannel:
        gce = FakeGceMetadata()
        return _GceChannel(gce, {"SPOTRUN_GCE_METADATA_URL": gce.url})

    def reclaim(self, instance_id: str) -> None:
        zone, name = instance_id.split("/", 1)
        self.fake.preempt(zone, name)


# ---- Azure ----------------------------------------------------------------------------------------------------


@dataclass
class _AzureChannel(_Channel):
    vm_name: str = ""

    def announce(self, notice_seconds: float) -> None:
        self.server.schedule_event("Preempt", resources=[self.vm_name], not_before_in=notice_seconds)  # type: ignore[attr-defined]


class AzureSide:
    """Azure VMs as `tests/fakes_azure.FakeArm` keeps them; instance ids are VM names."""

    cloud = "azure"
    notice_source = "azure-scheduled-events"

    def __init__(self, arm: Any) -> None:
        self.arm = arm

    def running(self) -> set[str]:
        return {vm.name for vm in list(self.arm.vms.values()) if vm.power_state == "running"}

    def boot_of(self, instance_id: str) -> Boot:
        vm = self.arm.vms[instance_id.lower()]
        zones = vm.resource.get("zones") or []
        zone = f"{vm.resource['location']}-{zones[0]}" if zones else vm.resource["location"]
        return Boot(instance_id, zone, base64.b64decode(self._custom_data(instance_id)).decode())

    def _custom_data(self, instance_id: str) -> str:
        """The custom data the VM was created with: Azure hands it to the VM, never back through the API."""
        path_end = f"/virtualmachines/{instance_id.lower()}"
        for request in reversed(list(self.arm.requests)):
            if request.method == "PUT" and request.path.lower().endswith(path_end):
                data = (request.body or {}).get("properties", {}).get("osProfile", {}).get("customData")
                if data:
                    return data
        raise LookupError(f"no create request with custom data for VM {instance_id}")

    def notice_channel(self, instance_id: str) -> NoticeChannel:
        events = FakeAzureEvents()
        return _AzureChannel(events, {"SPOTRUN_AZURE_METADATA_URL": events.url}, vm_name=instance_id)

    def reclaim(self, instance_id: str) -> None:
        self.arm.evict(instance_id)
