"""The pieces every cloud's startup script shares (spotrun.providers.startup), on their own."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from spotrun.providers.startup import encoded_within_limit, job_id_of, render_bootstrap

BOOT = {"argv": ["python", "-m", "spotrun.agent"], "env": {"SPOTRUN_CLOUD": "from-boot", "A": "1"}}


def exports(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("export ")]


def bootstrap(**cloud_env: Any) -> str:
    return render_bootstrap(
        BOOT, install_command="true", python="/opt/v/bin/python", instance_disk="/d", agent_log="/l",
        comment="made here", **cloud_env,
    )


def test_env_before_boot_comes_first_and_the_boot_env_may_set_it_again() -> None:
    assert exports(bootstrap(env_before_boot={"SPOTRUN_CLOUD": "aws"})) == [
        "export SPOTRUN_INSTANCE_DISK=/d",
        "export SPOTRUN_CLOUD=aws",
        'export PATH=/opt/v/bin:"$PATH"',
        "export SPOTRUN_CLOUD=from-boot",
        "export A=1",
    ]


def test_env_over_boot_replaces_the_boot_envs_values() -> None:
    assert exports(bootstrap(env_over_boot={"SPOTRUN_CLOUD": "gcp", "EXTRA": "x y"})) == [
        "export SPOTRUN_INSTANCE_DISK=/d",
        'export PATH=/opt/v/bin:"$PATH"',
        "export SPOTRUN_CLOUD=gcp",
        "export A=1",
        "export EXTRA='x y'",
    ]


def test_the_comment_is_the_second_line() -> None:
    assert bootstrap().splitlines()[:2] == ["#!/bin/bash", "# made here"]


def test_a_relative_interpreter_leaves_path_alone() -> None:
    script = render_bootstrap(
        {"argv": ["/c/bin/python3"]}, install_command="true", python="python3", instance_disk="/d", agent_log="/l",
        comment="c",
    )
    assert "PATH" not in script
    assert script.splitlines()[-1] == "exec python3 >>/l 2>&1"


def test_a_script_within_the_limit_comes_back_encoded() -> None:
    assert encoded_within_limit("é", 2, "the thing") == "é".encode()


def test_a_script_over_the_limit_names_the_limit() -> None:
    with pytest.raises(ValueError, match=r"startup script is 3 bytes; the thing is limited to 2 bytes"):
        encoded_within_limit("abc", 2, "the thing")


@pytest.mark.parametrize(
    ("user_data", "job_id"),
    [
        ({"env": {"SPOTRUN_AGENT_CONFIG": json.dumps({"job_id": 42, "token": "t"})}}, "42"),
        ({"env": {"SPOTRUN_AGENT_CONFIG": json.dumps({"token": "t"})}}, None),
        ({"env": {"SPOTRUN_AGENT_CONFIG": "not json"}}, None),
        ({"env": {"SPOTRUN_AGENT_CONFIG": "[1, 2]"}}, None),
        ({"env": {}}, None),
        ({"env": ["SPOTRUN_AGENT_CONFIG=1"]}, None),
        ({}, None),
        ("not a mapping", None),
    ],
)
def test_the_job_id_comes_from_the_agent_config_in_the_boot_env(user_data: Any, job_id: str | None) -> None:
    assert job_id_of(user_data) == job_id


def test_the_shared_module_pulls_in_no_cloud_sdk() -> None:
    probe = (
        "import sys, spotrun.providers.startup; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'boto3', 'botocore', 'google', 'azure'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
