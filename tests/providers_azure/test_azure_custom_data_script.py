"""The custom-data script, rendered and then run by bash the way cloud-init would (with local paths)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spotrun.providers.azure import render_startup_script
from spotrun.providers.azure.startup import MAX_CUSTOM_DATA_BYTES, custom_data

TRICKY = "it's $HOME \"quoted\" `tick` \\ back\nnew line ;|&"
REPORT = "import json, os, sys; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ), 'exe': sys.executable}))"


def run_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "custom-data.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30, check=False
    )


def test_the_script_installs_then_execs_the_agent_with_its_env(tmp_path: Path) -> None:
    disk, log = tmp_path / "disk", tmp_path / "agent.log"
    user_data = {
        "argv": ["/controller/venv/bin/python3.12", "-c", REPORT],
        "env": {"SPOTRUN_AGENT_CONFIG": json.dumps({"token": "s3cret-token"}), "TRICKY": TRICKY, "PATH": "/controller/bin"},
    }
    script = render_startup_script(
        user_data, install_command=f"touch {tmp_path}/installed", python=sys.executable, vm_name="spotrun-sr-1-a",
        instance_disk=str(disk), agent_log=str(log),
    )

    result = run_script(script, tmp_path)

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "installed").exists()
    report = json.loads(log.read_text())
    assert report["cwd"] == str(disk)
    assert report["exe"] == sys.executable
    env = report["env"]
    assert env["TRICKY"] == TRICKY
    assert json.loads(env["SPOTRUN_AGENT_CONFIG"]) == {"token": "s3cret-token"}
    assert (env["SPOTRUN_CLOUD"], env["SPOTRUN_AZURE_VM_NAME"]) == ("azure", "spotrun-sr-1-a")
    assert env["SPOTRUN_INSTANCE_DISK"] == str(disk)
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "/controller/bin" not in env["PATH"]
    assert "s3cret-token" not in result.stdout + result.stderr  # cloud-init's own log is not root-only


def test_a_failed_install_stops_the_boot(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    script = render_startup_script(
        {"argv": ["python", "-c", "print('ran')"], "env": {}}, install_command="false", python=sys.executable,
        vm_name="spotrun-x", instance_disk=str(tmp_path / "disk"), agent_log=str(log),
    )

    assert run_script(script, tmp_path).returncode != 0
    assert not log.exists()


def test_custom_data_is_base64_of_the_script() -> None:
    assert base64.b64decode(custom_data("#!/bin/bash\necho hi\n")) == b"#!/bin/bash\necho hi\n"


def test_custom_data_over_azures_limit_is_refused() -> None:
    huge = {"argv": ["python"], "env": {"BIG": "x" * MAX_CUSTOM_DATA_BYTES}}
    script = render_startup_script(huge, "true", "python3", vm_name="spotrun-x")

    with pytest.raises(ValueError, match="Azure custom data is limited to"):
        custom_data(script)


@pytest.mark.parametrize(
    ("user_data", "problem"),
    [
        ({"argv": "python -m spotrun.agent"}, "'argv' is not a non-empty list"),
        ({"argv": ["python"], "env": {"1BAD": "x"}}, "invalid variable name '1BAD'"),
        ({"argv": ["python"], "env": {"N": 3}}, "value of N must be a string"),
        ({"argv": ["python"], "env": ["N=3"]}, "'env' must be a mapping"),
    ],
)
def test_bad_user_data_is_named(user_data, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        render_startup_script(user_data, "true", "python3", vm_name="spotrun-x")
