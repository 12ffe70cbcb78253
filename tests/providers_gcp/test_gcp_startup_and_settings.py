"""The startup script GCE runs at boot, and the provider's settings.

What every cloud's startup script does (run by bash, malformed boot commands) is in tests/providers_startup.
"""

from __future__ import annotations

import json
import shlex

import pytest

from spotrun.providers.gcp import GcpSettings, render_startup_script
from spotrun.providers.gcp.naming import instance_name, label_value, parse_instance_id, request_id
from spotrun.providers.gcp.startup import MAX_METADATA_VALUE_BYTES

AGENT_TOKEN = "agent-secret-token"
BOOT = {
    "argv": ["/home/me/.venv/bin/python", "-m", "spotrun.agent"],
    "env": {"SPOTRUN_AGENT_CONFIG": json.dumps({"job_id": 3, "token": AGENT_TOKEN}), "PATH": "/home/me/.venv/bin"},
}


def test_script_installs_then_execs_the_agent_with_its_env():
    script = render_startup_script(BOOT, "pip install spotrun", "/opt/spotrun/venv/bin/python")
    lines = script.splitlines()

    assert lines[0] == "#!/bin/bash"
    assert "set -euo pipefail" in lines
    assert lines.index("pip install spotrun") < lines.index(f"export SPOTRUN_AGENT_CONFIG={shlex.quote(BOOT['env']['SPOTRUN_AGENT_CONFIG'])}")
    assert "export SPOTRUN_CLOUD=gcp" in lines
    assert "export PATH=/opt/spotrun/venv/bin:\"$PATH\"" in lines
    assert "/home/me/.venv/bin" not in script  # the controller's PATH and interpreter stay home
    assert lines[-1].startswith("exec /opt/spotrun/venv/bin/python -m spotrun.agent >>/var/log/spotrun-agent.log 2>&1")
    assert "set -x" not in script and "echo" not in script


def test_script_carries_no_credentials_of_the_controller(provider, launch_request, cloud, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/home/me/key.json")
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "ya29.secret")
    provider.launch(launch_request())

    (insert,) = cloud.requests_to("POST", "/instances")
    sent = json.dumps(insert.body)
    for secret in ("GOOGLE_APPLICATION_CREDENTIALS", "key.json", "ya29", "private_key", "Authorization"):
        assert secret not in sent
    metadata = {item["key"] for item in insert.body["metadata"]["items"]}
    assert metadata == {"startup-script", "spotrun-client-token"}


def test_a_script_over_gces_metadata_limit_is_refused():
    huge = {"argv": ["python"], "env": {"BIG": "x" * MAX_METADATA_VALUE_BYTES}}
    with pytest.raises(ValueError, match="256|262144"):
        render_startup_script(huge, "true", "python3")


def test_names_come_from_the_client_token():
    assert instance_name("sr-12-0123456789abcdef") == "spotrun-sr-12-0123456789abcdef"
    hashed = instance_name("Upper_Case/Token")
    assert hashed.startswith("spotrun-") and len(hashed) <= 63 and hashed == instance_name("Upper_Case/Token")
    assert request_id("a") == request_id("a") != request_id("b")
    assert label_value("sr-1-ab") == "sr-1-ab" and label_value("Sr 1").startswith("h-")
    assert parse_instance_id("europe-west4-a/spotrun-x") == ("europe-west4-a", "spotrun-x")


def test_settings_from_the_environment():
    settings = GcpSettings.from_env(
        {"SPOTRUN_GCP_PROJECT": "my-project-1", "SPOTRUN_GCP_PREEMPTIBLE": "true", "SPOTRUN_GCP_DISK_SIZE_GB": "200",
         "SPOTRUN_GCP_SCOPES": "a, b"},
        service_account="runner@my-project-1.iam.gserviceaccount.com",
    )
    assert settings.project == "my-project-1" and settings.preemptible is True and settings.disk_size_gb == 200
    assert settings.scopes == ("a", "b")
    assert settings.service_account == "runner@my-project-1.iam.gserviceaccount.com"
    assert settings.max_lifetime_seconds == 24 * 3600


@pytest.mark.parametrize(
    ("environ", "overrides", "message"),
    [
        ({}, {"region": "x"}, "unknown GCP provider option"),
        ({"SPOTRUN_GCP_PREEMPTIBLE": "maybe"}, {}, "SPOTRUN_GCP_PREEMPTIBLE must be true or false"),
        ({"SPOTRUN_GCP_DISK_SIZE_GB": "big"}, {}, "SPOTRUN_GCP_DISK_SIZE_GB must be a number"),
        ({}, {"project": "My Project"}, "project must be a GCP project id"),
        ({}, {"image": "ubuntu"}, "image must be an image URL"),
        ({}, {"preemptible": True, "max_run_duration": 3600}, "max_run_duration applies to Spot VMs only"),
        ({}, {"call_timeout": 0}, "call_timeout must be > 0"),
    ],
)
def test_bad_settings_are_named(environ, overrides, message):
    with pytest.raises((TypeError, ValueError), match=message):
        GcpSettings.from_env(environ, **overrides)


def test_the_spot_request_body_passes_gces_own_rules(provider, launch_request, cloud):
    """The fake refuses what GCE refuses (automaticRestart on spot, bad labels); spotrun's body passes."""
    provider.launch(launch_request(token="sr-9-" + "f" * 40))
    assert len(cloud.instances) == 1
