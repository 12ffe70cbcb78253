"""The VirtualMachine that a launch request asks Azure to create.

The NIC, its public IP (if any) and the OS disk are created with the VM (network API version 2020-11-01
configurations) and marked deleteOption=Delete, so deleting the VM, or evicting it with policy Delete, leaves
nothing behind and spotrun needs no network client.
"""

from __future__ import annotations

from azure.mgmt.compute.models import (
    BillingProfile,
    HardwareProfile,
    ImageReference,
    LinuxConfiguration,
    ManagedDiskParameters,
    NetworkProfile,
    OSDisk,
    OSProfile,
    PublicIPAddressSku,
    SshConfiguration,
    SshPublicKey,
    StorageProfile,
    SubResource,
    UserAssignedIdentitiesValue,
    VirtualMachine,
    VirtualMachineIdentity,
    VirtualMachineNetworkInterfaceConfiguration,
    VirtualMachineNetworkInterfaceIPConfiguration,
    VirtualMachinePublicIPAddressConfiguration,
)

from spotrun.providers.azure.instances import JOB_TAG, TOKEN_TAG, zones_field
from spotrun.providers.azure.settings import AzureSettings
from spotrun.providers.azure.startup import custom_data, render_startup_script
from spotrun.providers.base import LaunchRequest
from spotrun.providers.startup import job_id_of

NETWORK_API_VERSION = "2020-11-01"  # lets the VM create its own NIC
CAPACITY_ONLY_MAX_PRICE = -1.0  # spot, paying up to the on-demand price: evicted only for capacity


def vm_body(request: LaunchRequest, name: str, settings: AzureSettings) -> VirtualMachine:
    script = render_startup_script(request.user_data, settings.bootstrap_command, settings.python, vm_name=name)
    vm = VirtualMachine(
        location=settings.location,
        zones=zones_field(settings.location, request.zone) or None,
        tags=tags(request),
        hardware_profile=HardwareProfile(vm_size=request.instance_type),
        storage_profile=StorageProfile(image_reference=image_reference(settings.image), os_disk=_os_disk(settings)),
        os_profile=OSProfile(
            computer_name=name,
            admin_username=settings.admin_username,
            custom_data=custom_data(script),
            linux_configuration=LinuxConfiguration(
                disable_password_authentication=True,
                ssh=SshConfiguration(
                    public_keys=[
                        SshPublicKey(
                            path=f"/home/{settings.admin_username}/.ssh/authorized_keys",
                            key_data=settings.ssh_public_key.strip(),
                        )
                    ]
                ),
            ),
        ),
        network_profile=_network(name, settings),
    )
    if settings.identity_id:
        vm.identity = VirtualMachineIdentity(
            type="UserAssigned", user_assigned_identities={settings.identity_id: UserAssignedIdentitiesValue()}
        )
    if request.market == "spot":
        vm.priority = "Spot"
        vm.eviction_policy = settings.eviction_policy
        max_price = request.max_price if request.max_price is not None else CAPACITY_ONLY_MAX_PRICE
        vm.billing_profile = BillingProfile(max_price=max_price)
    else:
        vm.priority = "Regular"
    return vm


def tags(request: LaunchRequest) -> dict[str, str]:
    found = {TOKEN_TAG: request.client_token}
    job_id = job_id_of(request.user_data)
    if job_id is not None:
        found[JOB_TAG] = job_id
    return found


def image_reference(image: str) -> ImageReference:
    """A URN publisher:offer:sku:version, or the resource id of an image or gallery image (version)."""
    if image.lower().startswith("/subscriptions/"):
        return ImageReference(id=image)
    publisher, offer, sku, version = image.split(":")
    return ImageReference(publisher=publisher, offer=offer, sku=sku, version=version)


def _os_disk(settings: AzureSettings) -> OSDisk:
    disk = OSDisk(
        create_option="FromImage",
        delete_option="Delete",
        managed_disk=ManagedDiskParameters(storage_account_type=settings.os_disk_type),
    )
    if settings.os_disk_size_gb is not None:
        disk.disk_size_gb = settings.os_disk_size_gb
    return disk


def _network(name: str, settings: AzureSettings) -> NetworkProfile:
    ip_configuration = VirtualMachineNetworkInterfaceIPConfiguration(
        name=f"{name}-ip", subnet=SubResource(id=settings.subnet_id), primary=True
    )
    if settings.public_ip:
        ip_configuration.public_ip_address_configuration = VirtualMachinePublicIPAddressConfiguration(
            name=f"{name}-public-ip", sku=PublicIPAddressSku(name="Standard"), delete_option="Delete"
        )
    return NetworkProfile(
        network_api_version=NETWORK_API_VERSION,
        network_interface_configurations=[
            VirtualMachineNetworkInterfaceConfiguration(
                name=f"{name}-nic", primary=True, delete_option="Delete", ip_configurations=[ip_configuration]
            )
        ],
    )
