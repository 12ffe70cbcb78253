"""How the AWS provider launches: image, network, identity, bootstrap; from arguments or SPOTRUN_AWS_* variables.

Credentials are not settings: boto3 finds them through its standard chain (environment, shared files, SSO,
instance or container roles) and spotrun never reads, stores or forwards them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from spotrun.providers.env_settings import key_value_pairs, settings_values

# Ubuntu 24.04 (Python 3.12) with NVIDIA's open kernel driver: G4dn, G5, G6, P4, P5 and newer, not P3 (V100).
DEFAULT_IMAGE = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
DEFAULT_PYTHON = "python3"
DEFAULT_PRODUCT_DESCRIPTION = "Linux/UNIX"
ENV_PREFIX = "SPOTRUN_AWS_"
_AMI_ID = re.compile(r"ami-[0-9a-f]{8,17}")


def default_install_command(python: str = DEFAULT_PYTHON) -> str:
    return f"{python} -m pip install --quiet 'spotrun=={metadata.version('spotrun')}'"


@dataclass(frozen=True)
class AwsSettings:
    region: str | None = None  # None: boto3's chain (AWS_REGION, AWS_DEFAULT_REGION, the shared config)
    image: str = DEFAULT_IMAGE  # an AMI id, or the name of an SSM parameter holding one (starts with "/")
    subnets: Mapping[str, str] = field(default_factory=dict)  # zone -> subnet id; a zone not named: default VPC
    security_group_ids: tuple[str, ...] = ()
    key_name: str | None = None
    instance_profile: str | None = None  # a name or an ARN
    python: str = DEFAULT_PYTHON  # the instance's interpreter that runs the agent
    install_command: str | None = None  # None: pip install of this spotrun version with `python`
    product_description: str = DEFAULT_PRODUCT_DESCRIPTION  # whose spot prices to read

    def __post_init__(self) -> None:
        if not (_AMI_ID.fullmatch(self.image) or self.image.startswith("/")):
            raise ValueError(f"image must be an AMI id (ami-...) or an SSM parameter name (/...), got {self.image!r}")
        for zone, subnet in self.subnets.items():
            if not subnet.startswith("subnet-"):
                raise ValueError(f"subnets[{zone!r}] must be a subnet id (subnet-...), got {subnet!r}")
        for group in self.security_group_ids:
            if not group.startswith("sg-"):
                raise ValueError(f"security_group_ids must hold security group ids (sg-...), got {group!r}")
        if not self.python.strip():
            raise ValueError("python must name the instance's interpreter, got an empty string")

    @property
    def bootstrap_command(self) -> str:
        return self.install_command if self.install_command is not None else default_install_command(self.python)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> AwsSettings:
        """SPOTRUN_AWS_<FIELD> variables (lists comma-separated, subnets as zone=subnet,...), then `overrides`."""
        values = settings_values(cls, ENV_PREFIX, "AWS", environ, overrides, {"subnets": _read_subnets})
        if "security_group_ids" in values:
            values["security_group_ids"] = tuple(values["security_group_ids"])
        if "subnets" in values:
            values["subnets"] = dict(values["subnets"])
        return cls(**values)


def _read_subnets(variable: str, raw: str) -> dict[str, str]:
    return dict(key_value_pairs(variable, raw, "zone=subnet-id"))
