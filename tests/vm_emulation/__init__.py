"""A small VM emulator for end-to-end tests against the cloud fakes, with no network.

A provider launches against its cloud's fake (moto, `fakes_gcp`, `fakes_azure`); the `Hypervisor` sees each new
running instance there, reads back the startup script the provider rendered for it, and boots it as an
`EmulatedVm`: the script runs with bash, its on-instance paths mapped to a per-VM folder, next to a per-VM fake
metadata service (`tests/fakes`) that the agent is pointed at. `Hypervisor.reclaim` does what the cloud does to
a spot instance: the notice on the metadata service, then the VM's processes are killed and the cloud fake
records the reclaim (AWS Server.SpotInstanceTermination, GCP compute.instances.preempted, Azure eviction).
`ControlPlane` runs the real agent API and a ticking `Controller` in the test's process.

Tests run with --import-mode=importlib, so a conftest that wants this package puts tests/ on sys.path:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    from vm_emulation import AwsSide, ControlPlane, Hypervisor
"""

from .clouds import AwsSide, AzureSide, Boot, CloudSide, GcpSide, NoticeChannel, ec2_repeated_terminate_keeps_reason
from .control_plane import ControlPlane
from .hypervisor import Hypervisor
from .machine import BootError, EmulatedVm, map_filesystem

__all__ = [
    "AwsSide",
    "AzureSide",
    "Boot",
    "BootError",
    "CloudSide",
    "ControlPlane",
    "EmulatedVm",
    "GcpSide",
    "Hypervisor",
    "NoticeChannel",
    "ec2_repeated_terminate_keeps_reason",
    "map_filesystem",
]
