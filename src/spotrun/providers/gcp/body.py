"""The Instance resource spotrun asks GCE to create for one launch request."""

from __future__ import annotations

from collections.abc import Mapping

from google.cloud import compute_v1

from spotrun.gcp_accelerators import accelerator_type
from spotrun.providers.base import LaunchRequest
from spotrun.providers.gcp.naming import JOB_LABEL, TOKEN_LABEL, TOKEN_METADATA_KEY, instance_name, label_value
from spotrun.providers.gcp.settings import GcpSettings
from spotrun.providers.gcp.startup import render_startup_script
from spotrun.providers.startup import job_id_of


def instance_resource(request: LaunchRequest, settings: GcpSettings, accelerators: Mapping[str, int]) -> compute_v1.Instance:
    zone = request.zone
    return compute_v1.Instance(
        name=instance_name(request.client_token),
        machine_type=f"zones/{zone}/machineTypes/{request.instance_type}",
        labels=_labels(request),
        metadata=compute_v1.Metadata(items=[
            compute_v1.Items(
                key="startup-script",
                value=render_startup_script(request.user_data, settings.bootstrap_command, settings.python),
            ),
            compute_v1.Items(key=TOKEN_METADATA_KEY, value=request.client_token),
        ]),
        disks=[_boot_disk(zone, settings)],
        network_interfaces=[_network_interface(settings)],
        guest_accelerators=[
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{accelerator_type(name)}", accelerator_count=count
            )
            for name, count in accelerators.items()
        ],
        scheduling=scheduling(request.market, settings, has_accelerators=bool(accelerators)),
        service_accounts=(
            [compute_v1.ServiceAccount(email=settings.service_account, scopes=list(settings.scopes))]
            if settings.service_account else []
        ),
    )


def scheduling(market: str, settings: GcpSettings, has_accelerators: bool) -> compute_v1.Scheduling:
    if market == "on-demand":
        # GPUs cannot live-migrate: a VM with one must stop for host maintenance.
        return compute_v1.Scheduling(
            provisioning_model="STANDARD",
            automatic_restart=True,
            on_host_maintenance="TERMINATE" if has_accelerators else "MIGRATE",
        )
    if settings.preemptible:
        return compute_v1.Scheduling(preemptible=True, automatic_restart=False, on_host_maintenance="TERMINATE")
    spot = compute_v1.Scheduling(
        provisioning_model="SPOT",
        instance_termination_action="DELETE",
        automatic_restart=False,
        on_host_maintenance="TERMINATE",
    )
    if settings.max_run_duration is not None:
        spot.max_run_duration = compute_v1.Duration(seconds=int(settings.max_run_duration))
    return spot


def _boot_disk(zone: str, settings: GcpSettings) -> compute_v1.AttachedDisk:
    return compute_v1.AttachedDisk(
        boot=True,
        auto_delete=True,
        initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=settings.image,
            disk_size_gb=settings.disk_size_gb,
            disk_type=f"zones/{zone}/diskTypes/{settings.disk_type}",
        ),
    )


def _network_interface(settings: GcpSettings) -> compute_v1.NetworkInterface:
    interface = compute_v1.NetworkInterface(network=settings.network)
    if settings.subnetwork:
        interface.subnetwork = settings.subnetwork
    if settings.external_ip:
        interface.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    return interface


def _labels(request: LaunchRequest) -> dict[str, str]:
    labels = {TOKEN_LABEL: label_value(request.client_token), "spotrun-market": request.market}
    job_id = job_id_of(request.user_data)
    if job_id is not None:
        labels[JOB_LABEL] = label_value(job_id)
    return labels
