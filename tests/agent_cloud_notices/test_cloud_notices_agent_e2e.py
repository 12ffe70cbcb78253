"""`python -m spotrun.agent` on a "cloud" instance: a notice scheduled at the cloud's fake metadata service
reaches the controller as /notice from that cloud's source, the trainer gets SIGTERM, the attempt ends
preempted."""

from __future__ import annotations

import sys
import time
from pathlib import Path

# Stops on SIGTERM with the "saved, resume me" exit code.
TRAINER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda signum, frame: (print("got SIGTERM", flush=True), sys.exit(75)))
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def start_trainer(run_agent, controller, tmp_path: Path, metadata_env: dict[str, str]):  # type: ignore[no-untyped-def]
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    agent = run_agent(controller.url, run=f"{sys.executable} {script}", extra_env=metadata_env)
    controller.wait_for(lambda: "ready" in agent.stdout)  # echoed there at once; the controller's log gets it later
    return agent


def assert_preempted_by(controller, source: str) -> dict:  # type: ignore[no-untyped-def]
    (notice,) = controller.of("notice")
    assert notice.body["source"] == source
    assert "got SIGTERM" in controller.log_text()
    (exit_request,) = controller.of("exit")
    assert exit_request.body == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": True,
    }
    endpoints = [r.endpoint for r in controller.requests]
    assert endpoints.index("notice") < endpoints.index("exit")
    return notice.body


def test_aws_spot_interruption_preempts_the_attempt(controller, run_agent, tmp_path, imds):
    agent = start_trainer(run_agent, controller, tmp_path, {"SPOTRUN_AWS_METADATA_URL": imds.url})
    time.sleep(0.3)  # a few polls that must find nothing
    assert controller.of("notice") == []
    reclaim_at = imds.announce_interruption("terminate", reclaim_after=120)
    assert agent.wait() == 0
    notice = assert_preempted_by(controller, "aws-imds")
    assert notice["deadline"] == reclaim_at
    assert imds.tokens_issued == 1


def test_gcp_preemption_preempts_the_attempt(controller, run_agent, tmp_path, gce):
    agent = start_trainer(run_agent, controller, tmp_path, {"SPOTRUN_GCE_METADATA_URL": gce.url})
    time.sleep(0.3)
    assert controller.of("notice") == []
    flipped_at = gce.preempt()
    assert agent.wait() == 0
    notice = assert_preempted_by(controller, "gcp-metadata")
    assert flipped_at + 30 <= notice["deadline"] <= flipped_at + 33
    assert gce.long_polls() >= 1


def test_azure_preempt_event_preempts_the_attempt(controller, run_agent, tmp_path, azure):
    agent = start_trainer(
        run_agent, controller, tmp_path, {"SPOTRUN_AZURE_METADATA_URL": azure.url, "SPOTRUN_AZURE_VM_NAME": "vm-3"}
    )
    azure.schedule_event("Freeze", resources=["vm-3"])
    azure.schedule_event("Preempt", resources=["vm-9"])  # another VM's eviction
    time.sleep(0.3)
    assert controller.of("notice") == []
    event = azure.schedule_event("Preempt", resources=["vm-3"], not_before_in=30)
    assert agent.wait() == 0
    notice = assert_preempted_by(controller, "azure-scheduled-events")
    assert notice["deadline"] == event.not_before
    assert azure.acknowledged == []


def test_an_ec2_rebalance_recommendation_is_reported_and_the_trainer_runs_on(controller, run_agent, tmp_path, imds):
    agent = start_trainer(run_agent, controller, tmp_path, {"SPOTRUN_AWS_METADATA_URL": imds.url})
    recommended_at = imds.recommend_rebalance()
    controller.wait_for(lambda: controller.of("warning") != [])
    time.sleep(0.3)  # more polls: reported once, and no notice
    (warning,) = controller.of("warning")
    assert warning.body["source"] == "aws-imds" and warning.body["kind"] == "rebalance"
    assert warning.body["at"] == recommended_at and "rebalance recommendation" in warning.body["detail"]
    assert controller.of("notice") == [] and agent.process.poll() is None and "got SIGTERM" not in controller.log_text()
    imds.announce_interruption("terminate", reclaim_after=120)
    assert agent.wait() == 0
    assert_preempted_by(controller, "aws-imds")


def test_an_azure_freeze_is_reported_as_a_warning_of_its_kind(controller, run_agent, tmp_path, azure):
    agent = start_trainer(
        run_agent, controller, tmp_path, {"SPOTRUN_AZURE_METADATA_URL": azure.url, "SPOTRUN_AZURE_VM_NAME": "vm-3"}
    )
    azure.schedule_event("Freeze", resources=["vm-3"])
    controller.wait_for(lambda: controller.of("warning") != [])
    (warning,) = controller.of("warning")
    assert (warning.body["source"], warning.body["kind"]) == ("azure-scheduled-events", "Freeze")
    azure.schedule_event("Preempt", resources=["vm-3"], not_before_in=30)
    assert agent.wait() == 0


# Saves on SIGTERM; what it saw of its VM's Preempt event as it saved tells whether the agent had approved it.
SAVING_TRAINER = """
import json, os, signal, sys, time, urllib.request

def preempt_status():
    url = os.environ["SPOTRUN_AZURE_METADATA_URL"] + "/metadata/scheduledevents?api-version=2020-07-01"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Metadata": "true"})) as answer:
        return [e["EventStatus"] for e in json.load(answer)["Events"] if e["EventType"] == "Preempt"]

def save_and_stop(signum, frame):
    print("saving; Preempt event", *preempt_status(), flush=True)
    time.sleep(0.3)  # the save
    sys.exit(75)

signal.signal(signal.SIGTERM, save_and_stop)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_an_acknowledged_azure_preempt_is_approved_only_once_the_attempt_is_saved_and_reported(
    controller, run_agent, tmp_path, azure
):
    """SPOTRUN_AZURE_ACKNOWLEDGE_PREEMPT=1 approved the event as the agent first saw it: Azure may evict at once,
    with the trainer's save and the final backup still to come."""
    script = tmp_path / "trainer.py"
    script.write_text(SAVING_TRAINER)
    env = {"SPOTRUN_AZURE_METADATA_URL": azure.url, "SPOTRUN_AZURE_VM_NAME": "vm-3",
           "SPOTRUN_AZURE_ACKNOWLEDGE_PREEMPT": "1"}
    agent = run_agent(controller.url, run=f"{sys.executable} {script}", extra_env=env)
    controller.wait_for(lambda: "ready" in agent.stdout)
    event = azure.schedule_event("Preempt", resources=["vm-3"], not_before_in=30)
    assert agent.wait() == 0
    assert "saving; Preempt event Scheduled" in controller.log_text()
    (exit_request,) = controller.of("exit")
    assert exit_request.body == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": True,
    }
    assert azure.acknowledged == [event.event_id]
