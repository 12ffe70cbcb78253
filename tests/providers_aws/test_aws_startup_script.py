"""The startup script, rendered and then run by bash the way cloud-init would (with local paths)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spotrun.providers.aws import render_startup_script
from spotrun.providers.aws.startup import MAX_USER_DATA_BYTES

TRICKY = "it's $HOME \"quoted\" `tick` \\ back\nnew line ;|&"
REPORT = "import json, os, sys; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ), 'exe': sys.executable}))"


def run_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "user-data.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30, check=False
    )


def test_script_installs_then_execs_with_the_env(tmp_path: Path) -> None:
    disk, log = tmp_path / "disk", tmp_path / "agent.log"
    user_data = {
        "argv": ["/controller/venv/bin/python3.12", "-c", REPORT],
        "env": {"SPOTRUN_AGENT_CONFIG": json.dumps({"token": "s3cret-token"}), "TRICKY": TRICKY, "PATH": "/controller/bin"},
    }
    script = render_startup_script(
        user_data, install_command=f"touch {tmp_path}/installed", python=sys.executable,
        instance_disk=str(disk), agent_log=str(log),
    )

    result = run_script(script, tmp_path)

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "installed").exists()
    report = json.loads(log.read_text())
    assert report["cwd"] == str(disk)
    assert report["exe"] == sys.executable
    assert report["env"]["TRICKY"] == TRICKY
    assert json.loads(report["env"]["SPOTRUN_AGENT_CONFIG"]) == {"token": "s3cret-token"}
    assert report["env"]["SPOTRUN_INSTANCE_DISK"] == str(disk)
    assert report["env"]["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "/controller/bin" not in report["env"]["PATH"]
    # cloud-init keeps the script's own output in a log readable by more than root: no token there.
    assert "s3cret-token" not in result.stdout + result.stderr


def test_a_failed_install_stops_the_boot(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    script = render_startup_script(
        {"argv": ["python", "-c", "print('ran')"], "env": {}}, install_command="false", python=sys.executable,
        instance_disk=str(tmp_path / "disk"), agent_log=str(log),
    )

    assert run_script(script, tmp_path).returncode != 0
    assert not log.exists()


def test_a_non_python_command_is_kept_as_is() -> None:
    script = render_startup_script({"argv": ["/usr/bin/env", "true"], "env": {}}, "true", "python3")

    assert "\nexec /usr/bin/env true >>" in script


@pytest.mark.parametrize(
    ("user_data", "message"),
    [
        ({"env": {}}, "argv"),
        ({"argv": [], "env": {}}, "argv"),
        ({"argv": ["python", 3]}, "argv"),
        ({"argv": ["python"], "env": ["A=1"]}, "env"),
        ({"argv": ["python"], "env": {"BAD-NAME": "1"}}, "BAD-NAME"),
        ({"argv": ["python"], "env": {"N": 1}}, "N must be a string"),
    ],
)
def test_malformed_user_data_is_named(user_data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_startup_script(user_data, "true", "python3")


def test_oversized_user_data_is_refused() -> None:
    with pytest.raises(ValueError, match=str(MAX_USER_DATA_BYTES)):
        render_startup_script({"argv": ["python"], "env": {"BIG": "x" * MAX_USER_DATA_BYTES}}, "true", "python3")
