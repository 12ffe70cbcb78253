"""Every cloud's startup script, rendered and then run by bash the way the VM's boot would (with local paths)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotrun.providers.aws import render_startup_script as render_aws
from spotrun.providers.azure import render_startup_script as render_azure
from spotrun.providers.gcp import render_startup_script as render_gcp

TRICKY = "it's $HOME \"quoted\" `tick` \\ back\nnew line ;|&"
REPORT = "import json, os, sys; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ), 'exe': sys.executable}))"
VM_NAME = "spotrun-sr-1-a"
# cloud: (the cloud's renderer, what only that cloud adds to the env the agent starts with)
CLOUDS: dict[str, tuple[Callable[..., str], dict[str, str]]] = {
    "aws": (render_aws, {"SPOTRUN_CLOUD": "aws"}),
    "gcp": (render_gcp, {"SPOTRUN_CLOUD": "gcp"}),
    "azure": (
        lambda *args, **kwargs: render_azure(*args, vm_name=VM_NAME, **kwargs),
        {"SPOTRUN_CLOUD": "azure", "SPOTRUN_AZURE_VM_NAME": VM_NAME},
    ),
}
MALFORMED_USER_DATA = [
    ({"env": {}}, "'argv' is not a non-empty list"),
    ({"argv": [], "env": {}}, "'argv' is not a non-empty list"),
    ({"argv": ["python", 3]}, "'argv' is not a non-empty list"),
    ({"argv": "python -m spotrun.agent"}, "'argv' is not a non-empty list"),
    ({"argv": ["python"], "env": ["N=3"]}, "'env' must be a mapping"),
    ({"argv": ["python"], "env": {"BAD-NAME": "1"}}, "invalid variable name 'BAD-NAME'"),
    ({"argv": ["python"], "env": {"1BAD": "x"}}, "invalid variable name '1BAD'"),
    ({"argv": ["python"], "env": {"N": 1}}, "value of N must be a string, got int"),
]


@pytest.fixture(params=sorted(CLOUDS))
def cloud(request: pytest.FixtureRequest) -> str:
    return request.param


def render(cloud: str, user_data: dict[str, Any], install_command: str, python: str, **paths: str) -> str:
    renderer, _ = CLOUDS[cloud]
    return renderer(user_data, install_command, python, **paths)


def run_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "startup.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30, check=False
    )


def test_the_script_installs_then_execs_the_agent_with_its_env(cloud: str, tmp_path: Path) -> None:
    disk, log = tmp_path / "disk", tmp_path / "agent.log"
    user_data = {
        "argv": ["/controller/venv/bin/python3.12", "-c", REPORT],
        "env": {"SPOTRUN_AGENT_CONFIG": json.dumps({"token": "s3cret-token"}), "TRICKY": TRICKY, "PATH": "/controller/bin"},
    }
    script = render(
        cloud, user_data, install_command=f"touch {tmp_path}/installed", python=sys.executable,
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
    assert {name: env.get(name) for name in CLOUDS[cloud][1]} == CLOUDS[cloud][1]
    assert env["SPOTRUN_INSTANCE_DISK"] == str(disk)
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "/controller/bin" not in env["PATH"]
    # cloud-init keeps the script's own output in a log readable by more than root: no token there.
    assert "s3cret-token" not in result.stdout + result.stderr


def test_a_failed_install_stops_the_boot(cloud: str, tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    script = render(
        cloud, {"argv": ["python", "-c", "print('ran')"], "env": {}}, install_command="false", python=sys.executable,
        instance_disk=str(tmp_path / "disk"), agent_log=str(log),
    )

    assert run_script(script, tmp_path).returncode != 0
    assert not log.exists()


def test_a_non_python_command_is_kept_as_is(cloud: str) -> None:
    script = render(cloud, {"argv": ["/usr/bin/env", "true"], "env": {}}, "true", "python3")

    assert "\nexec /usr/bin/env true >>" in script


@pytest.mark.parametrize(("user_data", "message"), MALFORMED_USER_DATA)
def test_malformed_user_data_is_named(cloud: str, user_data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render(cloud, user_data, "true", "python3")
