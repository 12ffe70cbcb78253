"""Where and how the Azure provider creates VMs, from arguments or SPOTRUN_AZURE_* variables.

Credentials are not settings: azure-identity's DefaultAzureCredential finds them (environment, workload or
managed identity, Azure CLI / PowerShell / developer CLI login) and spotrun never reads, stores or forwards them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

from spotrun.providers.env_settings import settings_values

EvictionPolicy = Literal["Delete", "Deallocate"]

ENV_PREFIX = "SPOTRUN_AZURE_"
SUBSCRIPTION_ENV_FALLBACK = "AZURE_SUBSCRIPTION_ID"  # the variable Azure's own tools read
# Ubuntu 24.04 (Python 3.12) with NVIDIA drivers and CUDA; V100 sizes (NCv3, NDv2) need the 2404-v100 SKU.
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2404:latest"
DEFAULT_ADMIN_USERNAME = "spotrun"
# Ubuntu 24.04 refuses `pip install` into the system Python (PEP 668), so spotrun gets a venv of its own that
# still sees the image's packages.
AGENT_VENV = "/opt/spotrun/venv"
DEFAULT_PYTHON = f"{AGENT_VENV}/bin/python"
DEFAULT_LAUNCH_WAIT = 120.0
DEFAULT_POLL_INTERVAL = 5.0

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_URN = re.compile(r"[^:\s]+:[^:\s]+:[^:\s]+:[^:\s]+")
_SUBNET_ID = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+",
    re.IGNORECASE,
)
_IDENTITY_ID = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+",
    re.IGNORECASE,
)
_RESOURCE_GROUP = re.compile(r"[-\w.()]{0,89}[-\w()]")
_LOCATION = re.compile(r"[a-z0-9]+")
_ADMIN_USERNAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_SSH_KEY = re.compile(r"(ssh-rsa|ssh-ed25519|ecdsa-sha2-nistp\d+) \S+( .*)?")
_RESERVED_ADMIN_NAMES = frozenset({"root", "admin", "administrator", "user", "guest", "test"})


def default_install_command(python: str = DEFAULT_PYTHON) -> str:
    version = metadata.version("spotrun")
    if python != DEFAULT_PYTHON:
        return f"{python} -m pip install --quiet 'spotrun=={version}'"
    make_venv = f"python3 -m venv --system-site-packages {AGENT_VENV}"
    return (
        f"{{ {make_venv} || {{ apt-get update -q && apt-get install -y -q python3-venv && {make_venv}; }}; }}"
        f" && {python} -m pip install --quiet 'spotrun=={version}'"
    )


@dataclass(frozen=True)
class AzureSettings:
    subscription_id: str
    resource_group: str
    location: str  # e.g. "eastus"; zones are "<location>-<n>"
    subnet_id: str  # the full resource id of the subnet the VMs' NICs join
    ssh_public_key: str  # Azure requires a key (or a password) for a Linux VM; spotrun sets no password
    image: str = DEFAULT_IMAGE  # a URN publisher:offer:sku:version, or an image / gallery image resource id
    admin_username: str = DEFAULT_ADMIN_USERNAME
    eviction_policy: EvictionPolicy = "Delete"
    public_ip: bool = False  # give each VM a Standard public IP (for outbound access without a NAT gateway)
    identity_id: str | None = None  # a user-assigned managed identity for the VM (e.g. to reach blob storage)
    os_disk_size_gb: int | None = None  # None: the image's size
    os_disk_type: str = "Premium_LRS"
    python: str = DEFAULT_PYTHON  # the VM's interpreter that runs the agent
    install_command: str | None = None  # None: a venv at /opt/spotrun/venv with this spotrun version
    launch_wait: float = DEFAULT_LAUNCH_WAIT  # seconds launch waits for Azure to allocate; then it answers pending
    poll_interval: float = DEFAULT_POLL_INTERVAL  # seconds between polls of a long-running operation

    def __post_init__(self) -> None:
        _check(_UUID.fullmatch(self.subscription_id), "subscription_id", "a subscription id (a UUID)", self.subscription_id)
        _check(_RESOURCE_GROUP.fullmatch(self.resource_group), "resource_group", "a resource group name", self.resource_group)
        _check(_LOCATION.fullmatch(self.location), "location", "a location name such as eastus", self.location)
        _check(_SUBNET_ID.fullmatch(self.subnet_id), "subnet_id", "a subnet resource id (/subscriptions/.../subnets/...)", self.subnet_id)
        # The value is not echoed: what was pasted instead of a public key may be a private one.
        _check(_SSH_KEY.fullmatch(self.ssh_public_key.strip()), "ssh_public_key", "an OpenSSH public key line", "<not shown>")
        _check(
            _URN.fullmatch(self.image) or self.image.lower().startswith("/subscriptions/"),
            "image", "a URN publisher:offer:sku:version or an image resource id", self.image,
        )
        _check(
            _ADMIN_USERNAME.fullmatch(self.admin_username) and self.admin_username not in _RESERVED_ADMIN_NAMES,
            "admin_username", "a Linux user name that Azure allows (not root, admin, ...)", self.admin_username,
        )
        _check(self.eviction_policy in ("Delete", "Deallocate"), "eviction_policy", "Delete or Deallocate", self.eviction_policy)
        if self.identity_id is not None:
            _check(_IDENTITY_ID.fullmatch(self.identity_id), "identity_id", "a user-assigned identity resource id", self.identity_id)
        if self.os_disk_size_gb is not None:
            _check(self.os_disk_size_gb > 0, "os_disk_size_gb", "a positive number of GiB", self.os_disk_size_gb)
        _check(self.python.strip(), "python", "the VM's interpreter", self.python)
        _check(self.launch_wait >= 0, "launch_wait", "seconds >= 0", self.launch_wait)
        _check(self.poll_interval > 0, "poll_interval", "seconds > 0", self.poll_interval)

    @property
    def bootstrap_command(self) -> str:
        return self.install_command if self.install_command is not None else default_install_command(self.python)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> AzureSettings:
        """SPOTRUN_AZURE_<FIELD> variables (AZURE_SUBSCRIPTION_ID for the subscription too), then `overrides`."""
        values = settings_values(cls, ENV_PREFIX, "Azure", environ, overrides)
        subscription = environ.get(SUBSCRIPTION_ENV_FALLBACK)
        if subscription and "subscription_id" not in values:
            values["subscription_id"] = subscription
        fields = {f.name: f for f in dataclasses.fields(cls)}
        missing = [name for name, spec in fields.items() if _required(spec) and name not in values]
        if missing:
            hints = ", ".join(f"{name} ({ENV_PREFIX}{name.upper()})" for name in missing)
            raise ValueError(f"the Azure provider needs {hints}")
        return cls(**values)


def _required(spec: dataclasses.Field[Any]) -> bool:
    return spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING


def _check(ok: Any, name: str, expected: str, got: Any) -> None:
    if not ok:
        raise ValueError(f"Azure setting {name} must be {expected}, got {got!r}")
