"""How the GCP provider launches: project, image, network, identity, bootstrap; from arguments or SPOTRUN_GCP_* variables.

Credentials are not settings: google-auth finds them through its standard chain (GOOGLE_APPLICATION_CREDENTIALS,
gcloud's application-default credentials, the metadata server of the machine the controller runs on) and
spotrun never reads, stores or forwards them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from spotrun.providers.env_settings import settings_values

# Ubuntu 24.04 ships Python 3.12 (spotrun needs >= 3.11); it has no GPU driver (see docs/clouds/gcp.md).
DEFAULT_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
DEFAULT_NETWORK = "global/networks/default"
DEFAULT_VENV = "/opt/spotrun/venv"
DEFAULT_PYTHON = f"{DEFAULT_VENV}/bin/python"
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# Legacy preemptible VMs are always stopped after running 24 hours; Spot VMs have no such limit.
PREEMPTIBLE_MAX_LIFETIME_SECONDS = 24 * 3600
ENV_PREFIX = "SPOTRUN_GCP_"
_PROJECT_ID = re.compile(r"[a-z][-a-z0-9.:]{4,61}[a-z0-9]")


def default_install_command(venv: str = DEFAULT_VENV) -> str:
    """Ubuntu marks its Python externally managed (PEP 668), so spotrun goes into a virtualenv of its own."""
    return (
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null && "
        f"python3 -m venv {venv} && {venv}/bin/pip install --quiet 'spotrun=={metadata.version('spotrun')}'"
    )


@dataclass(frozen=True)
class GcpSettings:
    project: str | None = None  # None: the project of google-auth's default credentials
    image: str = DEFAULT_IMAGE  # an image or image family URL (projects/.../global/images/...)
    network: str = DEFAULT_NETWORK
    subnetwork: str | None = None  # regions/REGION/subnetworks/NAME; needed for custom-mode networks
    external_ip: bool = True  # an ephemeral public address (needed for pip without Cloud NAT)
    service_account: str | None = None  # the instance's identity (e-mail); None: no service account
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    disk_size_gb: int = 100
    disk_type: str = "pd-balanced"
    preemptible: bool = False  # spot market as legacy preemptible VMs (stopped after 24 h) instead of Spot VMs
    max_run_duration: float | None = None  # seconds; GCE deletes a Spot VM that has run this long
    python: str = DEFAULT_PYTHON  # the instance's interpreter that runs the agent
    install_command: str | None = None  # None: a virtualenv with this spotrun version in DEFAULT_VENV
    operation_timeout: float = 300.0  # how long launch waits for GCE's insert operation
    call_timeout: float = 60.0  # how long one API call may take, retries included
    poll_interval: float = 2.0  # pause between looks at an operation that is still running

    def __post_init__(self) -> None:
        if self.project is not None and not _PROJECT_ID.fullmatch(self.project):
            raise ValueError(f"project must be a GCP project id (lowercase letters, digits, hyphens), got {self.project!r}")
        if not (self.image.startswith("projects/") or self.image.startswith("https://")):
            raise ValueError(f"image must be an image URL such as projects/PROJECT/global/images/family/FAMILY, got {self.image!r}")
        if self.disk_size_gb < 10:
            raise ValueError(f"disk_size_gb must be at least 10, got {self.disk_size_gb}")
        if self.preemptible and self.max_run_duration is not None:
            raise ValueError("max_run_duration applies to Spot VMs only; it cannot be combined with preemptible=True")
        if self.max_run_duration is not None and self.max_run_duration < 30:
            raise ValueError(f"max_run_duration must be at least 30 seconds, got {self.max_run_duration}")
        for name in ("operation_timeout", "call_timeout", "poll_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not self.python.strip():
            raise ValueError("python must name the instance's interpreter, got an empty string")

    @property
    def bootstrap_command(self) -> str:
        return self.install_command if self.install_command is not None else default_install_command()

    @property
    def max_lifetime_seconds(self) -> float | None:
        """The longest a spot instance of these settings may live, whatever the market does; None: no limit."""
        if self.preemptible:
            return PREEMPTIBLE_MAX_LIFETIME_SECONDS
        return self.max_run_duration

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> GcpSettings:
        """SPOTRUN_GCP_<FIELD> variables (scopes comma-separated, booleans true/false), then `overrides`."""
        values = settings_values(cls, ENV_PREFIX, "GCP", environ, overrides)
        if "scopes" in values:
            values["scopes"] = tuple(values["scopes"])
        return cls(**values)
