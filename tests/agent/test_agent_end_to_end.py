"""`python -m spotrun.agent` against a recording controller: the whole attempt, as the instance runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import fsspec

from spotrun.sdk.backup_marks import MARKS_FOLDER
from spotrun.sdk.layout import MANIFEST_NAME, checkpoint_name, list_committed

from .conftest import ATTEMPT_ID, TOKEN, RecordingController, free_port

# A trainer that, on SIGTERM, writes checkpoint step 7 in the layout (payload, then manifest) and exits 75.
SAVING_TRAINER = """
import hashlib, json, os, signal, sys, time
from pathlib import Path

def save_and_exit(signum, frame):
    print("got SIGTERM", flush=True)
    folder = Path(os.environ["SPOTRUN_CHECKPOINT_DIR"]) / "ckpt-000000000007"
    folder.mkdir(parents=True)
    payload = b"weights" * 1000
    (folder / "model.bin").write_bytes(payload)
    files = {"model.bin": {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}}
    (folder / "manifest.json").write_text(json.dumps({"step": 7, "files": files}))
    sys.exit(75)

signal.signal(signal.SIGTERM, save_and_exit)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def announce_reclaim(metadata: Path, in_seconds: int) -> datetime:
    """The local metadata's instance-action, as EC2 writes it: terminate at a whole second `in_seconds` from now."""
    reclaim_at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=in_seconds)
    (metadata / "spot").mkdir(parents=True)
    (metadata / "spot" / "instance-action").write_text(
        json.dumps({"action": "terminate", "time": reclaim_at.isoformat().replace("+00:00", "Z")})
    )
    return reclaim_at


def write_trainer(tmp_path: Path, source: str) -> str:
    script = tmp_path / "trainer.py"
    script.write_text(source)
    return f"{sys.executable} {script}"


def wait_for_output(controller: RecordingController, agent, text: str, timeout: float = 10.0) -> None:
    """Until the command has written `text`, as the agent echoes it on its own stdout: at once, where the controller's
    log gets it with the log shipper's next batch, up to 0.5 s later."""
    controller.wait_for(lambda: text in agent.stdout, timeout)


def exit_body(controller: RecordingController) -> dict:
    (exit_request,) = controller.of("exit")
    return exit_request.body


def assert_log_offsets_contiguous(controller: RecordingController) -> None:
    expected = 0
    for request in controller.of("logs"):
        assert request.body["offset"] == expected
        expected += len(request.body["data"].encode("utf-8"))
    assert controller.log_gaps == []


def test_successful_command_reports_started_heartbeats_logs_and_success(controller, run_agent):
    command = (
        'echo "job=$SPOTRUN_JOB_ID attempt=$SPOTRUN_ATTEMPT resume=$SPOTRUN_RESUME dir=$SPOTRUN_CHECKPOINT_DIR"; '
        'echo "config=${SPOTRUN_AGENT_CONFIG:-absent} mine=$MY_VAR"; sleep 0.6; echo "déjà vu" >&2'
    )
    agent = run_agent(controller.url, run=command, env={"MY_VAR": "42"})
    assert agent.wait() == 0

    endpoints = [r.endpoint for r in controller.requests]
    assert endpoints[0] == "started" and endpoints[-1] == "exit"
    assert controller.of("started")[0].body["address"]
    assert len(controller.of("heartbeat")) >= 2
    assert all(r.body == {"checkpoint_step": None} for r in controller.of("heartbeat"))
    assert all(r.authorization == f"Bearer {TOKEN}" for r in controller.requests)
    assert exit_body(controller) == {
        "outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True, "nothing_to_back_up": True,
    }

    checkpoint_dir = agent.disk / "ckpts"
    expected_log = f"job=7 attempt=2 resume=0 dir={checkpoint_dir}\nconfig=absent mine=42\ndéjà vu\n"
    assert controller.log_text() == expected_log
    assert_log_offsets_contiguous(controller)
    assert agent.stdout == expected_log
    assert TOKEN not in agent.stderr
    assert "reporting exit: succeeded" in agent.stderr


def test_failing_command_reports_failed_with_its_exit_code(controller, run_agent):
    agent = run_agent(controller.url, run="echo boom; exit 3")
    assert agent.wait() == 0
    assert exit_body(controller) == {
        "outcome": "failed", "exit_code": 3, "checkpoint_synced": True, "nothing_to_back_up": True,
    }
    assert controller.log_text() == "boom\n"


def test_failing_setup_is_a_failure_and_run_never_starts(controller, run_agent, tmp_path):
    marker = tmp_path / "run-started"
    agent = run_agent(controller.url, setup="echo setting up; exit 4", run=f"touch {marker}")
    assert agent.wait() == 0
    assert exit_body(controller)["outcome"] == "failed"
    assert exit_body(controller)["exit_code"] == 4
    assert not marker.exists()


def test_setup_then_run_in_the_workdir(controller, run_agent, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    agent = run_agent(controller.url, setup="echo prepared > state.txt", run="cat state.txt; pwd", workdir=str(workdir))
    assert agent.wait() == 0
    assert controller.log_text() == f"prepared\n{workdir}\n"
    assert exit_body(controller)["outcome"] == "succeeded"


def test_exit_code_75_is_preempted(controller, run_agent):
    agent = run_agent(controller.url, run="exit 75")
    assert agent.wait() == 0
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": True,
    }


def assert_checkpoint_backed_up(store: Path) -> None:
    fs = fsspec.filesystem("file")
    assert [step for step, _ in list_committed(fs, str(store))] == [7]
    folder = store / checkpoint_name(7)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert (folder / "model.bin").read_bytes() == b"weights" * 1000
    assert manifest["files"]["model.bin"]["size"] == 7000


def test_local_metadata_notice_stops_trainer_backs_up_and_reports_preempted(controller, run_agent, tmp_path):
    metadata = tmp_path / "metadata"
    agent = run_agent(
        controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), extra_env={"SPOTRUN_LOCAL_METADATA": str(metadata)}
    )
    wait_for_output(controller, agent, "ready")
    reclaim_at = announce_reclaim(metadata, in_seconds=30)
    assert agent.wait() == 0

    (notice,) = controller.of("notice")
    assert notice.body["source"] == "local-metadata"
    assert notice.body["deadline"] == reclaim_at.timestamp()
    assert "terminate" in notice.body["detail"]
    assert "got SIGTERM" in controller.log_text()
    assert_checkpoint_backed_up(agent.store)
    # marked as this attempt's backup: the controller's evidence that the instance was alive then
    assert (agent.store / MARKS_FOLDER / f"job-7-attempt-{ATTEMPT_ID}.json").is_file()
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": False,
    }
    endpoints = [r.endpoint for r in controller.requests]
    assert endpoints.index("notice") < endpoints.index("exit")


def test_a_notice_whose_deadline_has_passed_still_lets_the_trainer_save_and_back_up(controller, run_agent, tmp_path):
    """Seen after its stated time (seen late, or the clocks disagree), the notice got the trainer killed at once: no
    save, and a final backup cut short by the deadline behind it."""
    metadata = tmp_path / "metadata"
    agent = run_agent(
        controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), extra_env={"SPOTRUN_LOCAL_METADATA": str(metadata)}
    )
    wait_for_output(controller, agent, "ready")
    reclaim_at = announce_reclaim(metadata, in_seconds=-30)
    assert agent.wait() == 0

    (notice,) = controller.of("notice")
    assert notice.body["deadline"] == reclaim_at.timestamp()  # reported as the cloud stated it
    assert "got SIGTERM" in controller.log_text()
    assert_checkpoint_backed_up(agent.store)
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": False,
    }


def test_a_command_that_exits_0_after_the_notice_finished_and_is_not_run_again(controller, run_agent, tmp_path):
    """Its loop done, the trainer's last save and evaluation ended at 0 after the SIGTERM: reported "preempted", the
    controller ran the finished job again."""
    agent = run_agent(controller.url, run=write_trainer(tmp_path, FINISHING_TRAINER), notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert [n.body["source"] for n in controller.of("notice")] == ["sigterm"]
    assert exit_body(controller) == {
        "outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True, "nothing_to_back_up": True,
    }


def test_a_setup_that_exits_0_after_the_notice_is_preempted_not_succeeded(controller, run_agent, tmp_path):
    """A setup that ends 0 on the SIGTERM (or finishes as the notice comes) was reported "succeeded": the controller
    ended the job as done though its run command never started."""
    marker = tmp_path / "run-started"
    setup = "trap 'exit 0' TERM; echo ready; sleep 60 & wait"
    agent = run_agent(controller.url, setup=setup, run=f"touch {marker}", notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert [n.body["source"] for n in controller.of("notice")] == ["sigterm"]
    assert exit_body(controller)["outcome"] == "preempted"
    assert not marker.exists()


def test_a_setups_background_process_does_not_outlive_the_attempt(controller, run_agent, tmp_path):
    """Only the run command's group was killed at the end: a daemon the setup started ran on after the agent."""
    pidfile = tmp_path / "setup.pid"
    agent = run_agent(controller.url, setup=f"sleep 300 >/dev/null 2>&1 & echo $! > {pidfile}", run="echo run")
    assert agent.wait() == 0
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while process_alive(pid):
        assert time.monotonic() < deadline, "the setup's background process outlived the agent"
        time.sleep(0.05)
    assert exit_body(controller)["outcome"] == "succeeded"


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return status != "Z"  # a zombie has ended


HELPER_STILL_SAVING = SAVING_TRAINER.replace("signal.signal(signal.SIGTERM, save_and_exit)", """
if os.fork() == 0:  # a helper of the trainer's group, still writing the checkpoint when the trainer exits 0
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1), os.dup2(quiet, 2)  # the output pipe closes with the trainer: its exit is seen at once
    while not os.path.exists(os.environ["RELEASE"]):
        time.sleep(0.05)
    try:
        save_and_exit(None, None)
    finally:
        os._exit(0)
print("ready", flush=True)
sys.exit(0)
""")


def test_after_a_normal_exit_the_groups_helpers_finish_before_the_backup_and_a_notice_then_is_told(
    controller, run_agent, tmp_path
):
    """The final backup ran at once, without the checkpoint a helper of the trainer's group was still writing, and
    the helper was killed; a notice that came meanwhile was never told to the controller."""
    release = tmp_path / "release"
    agent = run_agent(controller.url, run=write_trainer(tmp_path, HELPER_STILL_SAVING), notice_grace=5.0,
                      extra_env={"RELEASE": str(release)})
    controller.wait_for(lambda: "run command exited with 0" in agent.stderr)
    agent.process.send_signal(signal.SIGTERM)  # as the helper still saves
    controller.wait_for(lambda: controller.of("notice"))
    release.touch()  # the helper's checkpoint is written after the notice was told
    assert agent.wait() == 0
    assert_checkpoint_backed_up(agent.store)
    assert [n.body["source"] for n in controller.of("notice")] == ["sigterm"]
    assert exit_body(controller) == {
        "outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True, "nothing_to_back_up": False,
    }


def test_a_notice_while_the_groups_helpers_linger_after_a_normal_exit_is_told_at_once_and_kept_to(
    controller, run_agent, tmp_path
):
    """The helpers got notice_grace whatever came meanwhile: a notice leaving 3 s was told, and the exit reported,
    only once the 20 s grace had run out, past the cloud's deadline."""
    metadata = tmp_path / "metadata"
    agent = run_agent(controller.url, run="sleep 60 >/dev/null 2>&1 & echo ready", notice_grace=20.0,
                      sync_margin=1.0, extra_env={"SPOTRUN_LOCAL_METADATA": str(metadata)})
    wait_for_output(controller, agent, "ready")
    reclaim_at = announce_reclaim(metadata, in_seconds=3)
    controller.wait_for(lambda: controller.of("notice"), timeout=2.5)
    controller.wait_for(lambda: controller.of("exit"), timeout=20)
    assert time.time() < reclaim_at.timestamp()
    assert exit_body(controller) == {
        "outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True, "nothing_to_back_up": True,
    }
    assert [n.body["source"] for n in controller.of("notice")] == ["local-metadata"]
    assert agent.wait() == 0


# The log's hold on an exit report, past the 6 s these tests allow a report after the SIGTERM: one that waited for the
# log whatever the notice left still comes too late. The agent, its report sent, then waits that long again for the log
# it cannot ship before it ends: these tests kill it instead, as there is nothing more to see.
LOG_FLUSH_PAST_THE_BOUND = 6.5


def test_the_exit_report_waits_for_logs_no_longer_than_the_notice_leaves(controller, run_agent, tmp_path):
    """The controller taking no log chunks held the exit report 10 s, past a SIGTERM's 3 s."""
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), notice_grace=3.0,
                      sync_margin=0.5, log_flush_timeout=LOG_FLUSH_PAST_THE_BOUND)
    controller.wait_for(lambda: "ready" in controller.log_text())
    controller.fail_before["logs"] = 10**6  # from now on every log chunk is answered 503
    sent = time.monotonic()
    agent.process.send_signal(signal.SIGTERM)
    controller.wait_for(lambda: controller.of("exit"), timeout=15)
    assert time.monotonic() - sent < 6
    assert exit_body(controller)["outcome"] == "preempted"
    agent.process.kill()


def test_sigterm_to_the_agent_is_a_notice(controller, run_agent, tmp_path):
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    sent_at = time.time()
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0

    (notice,) = controller.of("notice")
    assert notice.body["source"] == "sigterm"
    assert sent_at + 5.0 <= notice.body["deadline"] <= sent_at + 5.0 + 1.0
    assert_checkpoint_backed_up(agent.store)
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": False,
    }


def test_the_jobs_log_says_in_a_line_that_the_command_is_asked_to_stop_for_a_notice(controller, run_agent, tmp_path):
    """The job's log showed only what the command wrote as it stopped (under torchrun, a traceback): not why."""
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0
    said = "spotrun agent: notice from sigterm (SIGTERM received by the agent): asking the command to checkpoint and stop"
    assert re.fullmatch(rf"ready\n{re.escape(said)} \(SIGTERM; killed if still running in [45] s\)\ngot SIGTERM\n",
                        controller.log_text()), controller.log_text()


def test_sigint_to_the_agent_is_a_notice_too(controller, run_agent, tmp_path):
    """A Ctrl-C (or an init system that stops with SIGINT) raised KeyboardInterrupt in the agent: the trainer was
    killed without a save, nothing was backed up and the controller was never told the attempt's exit."""
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGINT)
    assert agent.wait() == 0

    (notice,) = controller.of("notice")
    assert notice.body["source"] == "sigterm" and "SIGINT" in notice.body["detail"]
    assert_checkpoint_backed_up(agent.store)
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": False,
    }


def test_trainer_ignoring_sigterm_is_killed_when_the_grace_runs_out(controller, run_agent, tmp_path):
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    agent = run_agent(controller.url, run=write_trainer(tmp_path, stubborn), notice_grace=1.5, sync_margin=0.5)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert agent.wait() == 0
    assert time.monotonic() - started < 5
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": -signal.SIGKILL, "checkpoint_synced": True, "nothing_to_back_up": True,
    }


def test_restore_brings_only_committed_checkpoints_and_user_files(controller, run_agent, tmp_path):
    store = tmp_path / "store"
    complete, partial = store / checkpoint_name(3), store / checkpoint_name(5)
    complete.mkdir(parents=True)
    (complete / "model.bin").write_bytes(b"abc")
    (complete / MANIFEST_NAME).write_text(json.dumps({"step": 3, "files": {"model.bin": {"size": 3}}}))
    partial.mkdir()
    (partial / "model.bin").write_bytes(b"half")  # no manifest: a save that died half-way
    (store / "notes.txt").write_text("keep me")

    agent = run_agent(controller.url, run='echo "resume=$SPOTRUN_RESUME"; ls "$SPOTRUN_CHECKPOINT_DIR"; sleep 0.5')
    assert agent.wait() == 0

    local = agent.disk / "ckpts"
    assert sorted(p.name for p in local.iterdir()) == [checkpoint_name(3), "notes.txt"]
    assert (local / checkpoint_name(3) / "model.bin").read_bytes() == b"abc"
    assert (local / "notes.txt").read_text() == "keep me"
    assert controller.log_text() == f"resume=1\n{checkpoint_name(3)}\nnotes.txt\n"
    assert any(r.body == {"checkpoint_step": 3} for r in controller.of("heartbeat"))
    assert exit_body(controller)["outcome"] == "succeeded"


def test_reports_are_delivered_once_the_controller_comes_up(run_agent, start_server):
    port = free_port()
    recorder = RecordingController()
    agent = run_agent(f"http://127.0.0.1:{port}", run="echo early bird")
    recorder.wait_for(lambda: "controller unreachable for POST started" in agent.stderr)
    time.sleep(0.5)  # a few more tries
    assert agent.process.poll() is None  # waiting for the controller, not crashed
    start_server(recorder, port)
    assert agent.wait() == 0
    assert [r.endpoint for r in recorder.requests if r.endpoint != "heartbeat"] == ["started", "logs", "exit"]
    assert recorder.log_text() == "early bird\n"
    assert recorder.of("exit")[0].body["outcome"] == "succeeded"


def test_server_errors_are_retried_and_a_lost_log_answer_resends_the_same_offset(controller, run_agent, tmp_path):
    controller.fail_before.update(started=2, exit=2)
    controller.lose_response["logs"] = 1
    go_on = tmp_path / "go-on"
    agent = run_agent(controller.url, run=f"echo one; while [ ! -e {go_on} ]; do sleep 0.05; done; echo two")
    controller.wait_for(lambda: len(controller.of("logs")) == 2)
    go_on.touch()
    assert agent.wait() == 0

    first, second, third = controller.of("logs")
    assert first.body == second.body == {"offset": 0, "data": "one\n"}  # the same chunk, re-sent
    assert third.body == {"offset": 4, "data": "two\n"}
    assert controller.log_text() == "one\ntwo\n"
    assert len(controller.of("started")) == 1
    assert exit_body(controller)["outcome"] == "succeeded"


def test_periodic_backup_and_heartbeat_follow_the_trainers_checkpoints(controller, run_agent, tmp_path):
    go_on = tmp_path / "go-on"
    trainer = f"""
import hashlib, json, os, time
from pathlib import Path
folder = Path(os.environ["SPOTRUN_CHECKPOINT_DIR"]) / "ckpt-000000000007"
folder.mkdir(parents=True)
(folder / "model.bin").write_bytes(b"weights" * 1000)
(folder / "manifest.json").write_text(json.dumps({{"step": 7, "total_steps": 20, "files": {{"model.bin": {{"size": 7000}}}}}}))
while not Path({str(go_on)!r}).exists():
    time.sleep(0.05)
"""
    agent = run_agent(controller.url, run=write_trainer(tmp_path, trainer), sync_interval=0.3)
    controller.wait_for(lambda: any(r.body == {"checkpoint_step": 7, "total_steps": 20} for r in controller.of("heartbeat")))
    store_fs = fsspec.filesystem("file")
    controller.wait_for(lambda: list_committed(store_fs, str(agent.store)) != [])
    assert agent.process.poll() is None  # backed up while the trainer still runs
    go_on.touch()
    assert agent.wait() == 0
    assert_checkpoint_backed_up(agent.store)
    assert exit_body(controller) == {
        "outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True, "nothing_to_back_up": False,
    }


def test_a_missing_workdir_fails_the_attempt_with_the_reason_in_its_log(controller, run_agent, tmp_path):
    agent = run_agent(controller.url, run="true", workdir=str(tmp_path / "nowhere"))
    assert agent.wait() == 0
    assert exit_body(controller) == {
        "outcome": "failed", "exit_code": None, "checkpoint_synced": True, "nothing_to_back_up": True,
    }
    assert "cannot start the run command" in controller.log_text()
    assert "nowhere" in controller.log_text()


def test_an_unusable_store_fails_the_attempt_before_the_command_runs(controller, run_agent, tmp_path):
    marker = tmp_path / "ran"
    agent = run_agent(controller.url, run=f"touch {marker}", checkpoint_store="nosuchprotocol://bucket/job")
    assert agent.wait() == 0
    assert exit_body(controller) == {
        "outcome": "failed", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
    assert "cannot restore checkpoints from nosuchprotocol://bucket/job" in controller.log_text()
    assert not marker.exists()


def test_a_stop_asked_in_a_heartbeat_answer_checkpoints_and_ends_the_attempt(controller, run_agent, tmp_path):
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    time.sleep(0.5)
    assert controller.of("notice") == []  # heartbeats answered without a stop change nothing
    controller.replies["heartbeat"] = {"ok": True, "stop": "move: spot is back"}
    assert agent.wait() == 0

    (notice,) = controller.of("notice")
    assert notice.body["source"] == "controller" and "spot is back" in notice.body["detail"]
    assert "got SIGTERM" in controller.log_text()
    assert_checkpoint_backed_up(agent.store)
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": False,
    }


# Still saving when the cloud's notice comes, and a moment after.
SLOW_TO_STOP_TRAINER = SAVING_TRAINER.replace('    print("got SIGTERM", flush=True)\n', """
    print("got SIGTERM", flush=True)
    while not Path(os.environ["SPOTRUN_LOCAL_METADATA"], "spot", "instance-action").exists():
        time.sleep(0.05)
    time.sleep(0.5)
""")


def test_the_clouds_notice_during_a_stop_to_move_is_told_to_the_controller(controller, run_agent, tmp_path):
    """The agent told only the first notice it answered (the controller's stop): the controller never knew the cloud
    would take the instance, and terminated it itself, charged, where EC2 takes it back free."""
    metadata = tmp_path / "metadata"
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SLOW_TO_STOP_TRAINER), notice_grace=5.0,
                      extra_env={"SPOTRUN_LOCAL_METADATA": str(metadata)})
    wait_for_output(controller, agent, "ready")
    controller.replies["heartbeat"] = {"ok": True, "stop": "move: spot is back"}
    wait_for_output(controller, agent, "got SIGTERM")
    reclaim_at = announce_reclaim(metadata, in_seconds=60)
    assert agent.wait() == 0

    assert [n.body["source"] for n in controller.of("notice")] == ["controller", "local-metadata"]
    assert controller.of("notice")[1].body["deadline"] == reclaim_at.timestamp()
    endpoints = [r.endpoint for r in controller.requests]
    assert len(endpoints) - endpoints[::-1].index("notice") - 1 < endpoints.index("exit")
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": False,
    }


def write_committed_checkpoint(store: Path, step: int) -> None:
    folder = store / checkpoint_name(step)
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"abc")
    (folder / MANIFEST_NAME).write_text(json.dumps({"step": step, "files": {"model.bin": {"size": 3}}}))


def test_a_standby_restores_and_runs_only_once_released(controller, run_agent, tmp_path):
    controller.replies["heartbeat"] = {"ok": True, "stop": None, "hold": True}
    agent = run_agent(controller.url, hold=True, run='echo "resume=$SPOTRUN_RESUME"; ls "$SPOTRUN_CHECKPOINT_DIR"')
    controller.wait_for(lambda: len(controller.of("heartbeat")) >= 5)
    assert agent.process.poll() is None and controller.of("exit") == []
    assert "standing by" in controller.log_text() and "resume=" not in controller.log_text()
    assert not (agent.disk / "ckpts").exists()  # nothing restored while the old attempt still trains
    # the attempt it takes over from backs up its last checkpoint, ends, and the controller releases this one
    write_committed_checkpoint(tmp_path / "store", 9)
    controller.replies["heartbeat"] = {"ok": True, "stop": None, "hold": False}
    assert agent.wait() == 0
    assert controller.log_text().endswith(f"resume=1\n{checkpoint_name(9)}\n")
    assert exit_body(controller)["outcome"] == "succeeded"


def test_a_standby_taken_back_while_holding_reports_preempted_without_running(controller, run_agent, tmp_path):
    controller.replies["heartbeat"] = {"ok": True, "stop": None, "hold": True}
    marker = tmp_path / "ran"
    agent = run_agent(controller.url, hold=True, run=f"touch {marker}")
    controller.wait_for(lambda: len(controller.of("heartbeat")) >= 2)
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0
    (notice,) = controller.of("notice")
    assert notice.body["source"] == "sigterm"
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
    assert not marker.exists() and not list((tmp_path / "store").glob("*"))


def test_a_checkpoint_slower_to_save_and_back_up_than_a_notice_leaves_is_reported_once(controller, run_agent, tmp_path):
    """The manifest says how long the save took (the SDK's save_seconds); with the upload, more than the 5 s a notice
    without deadline leaves here (notice_grace): reported once, with the numbers, and said in the job's log. A
    quick checkpoint before it is not reported."""
    go_on, store = tmp_path / "go-on", tmp_path / "store"
    trainer = f"""
import json, os, time
from pathlib import Path
def save(step, seconds):
    folder = Path(os.environ["SPOTRUN_CHECKPOINT_DIR"]) / f"ckpt-{{step:012d}}"
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"weights" * 1000)
    (folder / "manifest.json").write_text(json.dumps({{"step": step, "save_seconds": seconds,
                                                       "files": {{"model.bin": {{"size": 7000}}}}}}))
    while not (Path({str(store)!r}) / folder.name / "manifest.json").exists():
        time.sleep(0.05)  # a periodic backup in between
for step, seconds in ((3, 0.5), (7, 45.0), (9, 60.0)):
    save(step, seconds)
while not Path({str(go_on)!r}).exists():
    time.sleep(0.05)
"""
    agent = run_agent(controller.url, run=write_trainer(tmp_path, trainer), sync_interval=0.2)
    controller.wait_for(lambda: len(list_committed(fsspec.filesystem("file"), str(agent.store))) == 3)
    go_on.touch()
    assert agent.wait() == 0
    [report] = controller.of("slow_save")
    assert report.body["checkpoint_step"] == 7 and report.body["save_seconds"] == 45.0
    assert report.body["budget_seconds"] == 5.0 and report.body["notice"].startswith("notice without deadline")
    assert 0 <= report.body["upload_seconds"] < 5
    logged = "".join(request.body["data"] for request in controller.of("logs"))
    assert "spotrun agent: checkpoint 7 took 45.0 s to save and" in logged


# A trainer whose helper, in its process group and deaf to SIGTERM, is still writing checkpoint 9 when the trainer
# itself has exited 75 at the notice.
TRAINER_WITH_A_SLOW_HELPER = """
import json, os, signal, subprocess, sys, textwrap, time
helper = textwrap.dedent('''
    import json, os, signal, time
    from pathlib import Path
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.environ["GO"] + ".deaf", "w").close()
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.05)
    time.sleep(2.5)  # longer than the agent waits for the output pipe to close (2 s)
    folder = Path(os.environ["SPOTRUN_CHECKPOINT_DIR"]) / "ckpt-000000000009"
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"abc")
    (folder / "manifest.json").write_text(json.dumps({"step": 9, "files": {"model.bin": {"size": 3}}}))
    time.sleep(60)
''')
subprocess.Popen([sys.executable, "-c", helper])
while not os.path.exists(os.environ["GO"] + ".deaf"):  # a SIGTERM to the group must find the helper deaf to it
    time.sleep(0.02)
def stop(signum, frame):
    open(os.environ["GO"], "w").close()
    sys.exit(75)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_at_a_notice_the_rest_of_the_group_is_waited_for_then_killed(controller, run_agent, tmp_path):
    """The trainer exited 75 at once; its helper, still writing checkpoint 9, was neither waited for (the final
    backup missed 9 and said it was synced) nor killed (it outlived the agent)."""
    go = tmp_path / "go"
    # the group is waited for until 3.5 s after the notice (notice_grace less sync_margin), the helper's checkpoint
    # written some 2.5 s after it
    agent = run_agent(controller.url, extra_env={"GO": str(go)}, run=write_trainer(tmp_path, TRAINER_WITH_A_SLOW_HELPER),
                      notice_grace=4.5, sync_margin=1)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": True, "nothing_to_back_up": False,
    }
    assert [step for step, _ in list_committed(fsspec.filesystem("file"), str(agent.store))] == [9]
    assert "helper" not in _processes_with(str(tmp_path))


def _processes_with(text: str) -> str:
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline", "environ"]):
        try:
            if text in " ".join(process.info["cmdline"] or []) or text in str(process.info["environ"] or {}):
                found.append("helper")
        except psutil.Error:
            continue
    return " ".join(found)


HANGING_STORE = """
import os, time
from pathlib import Path
import fsspec
from fsspec.implementations.local import LocalFileSystem

class HangingStore(LocalFileSystem):
    protocol = "hang"
    def ls(self, path, detail=True, **kwargs):
        self._answer_or_hang()
        return super().ls(path, detail=detail, **kwargs)
    def _open(self, path, *args, **kwargs):
        self._answer_or_hang()
        return super()._open(path, *args, **kwargs)
    def _answer_or_hang(self):
        if os.path.exists(os.environ["HANG"]):
            Path(os.environ["HANG"] + ".entered").touch()
        while os.path.exists(os.environ["HANG"]):
            time.sleep(0.05)  # a store that stopped answering

fsspec.register_implementation("hang", HangingStore, clobber=True)
"""

TRAINER_SAVED_ONCE = """
import hashlib, json, os, signal, sys, time
from pathlib import Path

def save(step):
    folder = Path(os.environ["SPOTRUN_CHECKPOINT_DIR"]) / f"ckpt-{step:012d}"
    folder.mkdir(parents=True)
    payload = b"weights" * 1000
    (folder / "model.bin").write_bytes(payload)
    files = {"model.bin": {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}}
    (folder / "manifest.json").write_text(json.dumps({"step": step, "files": files}))

def save_and_exit(signum, frame):
    save(7)
    sys.exit(75)

save(6)
signal.signal(signal.SIGTERM, save_and_exit)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_store_that_stops_answering_does_not_hold_the_exit_report_past_the_deadline(
    controller, run_agent, tmp_path
):
    """The periodic backup, stuck in a store call, held the lock the final backup waited on, with no deadline: the
    exit was never reported."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(HANGING_STORE)
    hang = tmp_path / "hang"
    env = {"PYTHONPATH": f"{plugin}:{':'.join(sys.path)}", "HANG": str(hang)}
    store = f"hang://{tmp_path / 'hung-store'}"
    agent = run_agent(controller.url, extra_env=env, run=write_trainer(tmp_path, TRAINER_SAVED_ONCE), notice_grace=3,
                      sync_margin=0.5, checkpoint_store=store, sync_interval=0.2)
    wait_for_output(controller, agent, "ready")
    hang.touch()  # from now on every call to the store hangs
    # the trainer's checkpoint 6 has the periodic backup call the store: until the SIGTERM, nothing else does
    entered, until = tmp_path / "hang.entered", time.monotonic() + 10
    while not entered.exists() and time.monotonic() < until:
        time.sleep(0.02)
    assert entered.exists(), "the periodic backup never called the store"
    agent.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert agent.wait() == 0
    assert time.monotonic() - started < 8
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": False, "nothing_to_back_up": False,
    }


SLOW_STORE = """
import time
import fsspec
from fsspec.implementations.local import LocalFileSystem

class SlowStore(LocalFileSystem):
    protocol = "slow"
    def ls(self, path, detail=True, **kwargs):
        time.sleep(1.5)  # a large restore
        return super().ls(path, detail=detail, **kwargs)

fsspec.register_implementation("slow", SlowStore, clobber=True)
"""


def test_a_notice_during_the_restore_is_reported_and_the_command_never_starts(controller, run_agent, tmp_path):
    """Noticed only once the restore was done, the command was started and killed at once (or, the restore
    failing, the attempt was a failure and the notice never reported)."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(SLOW_STORE)
    metadata = tmp_path / "metadata"
    announce_reclaim(metadata, in_seconds=60)
    env = {"PYTHONPATH": f"{plugin}:{':'.join(sys.path)}", "SPOTRUN_LOCAL_METADATA": str(metadata)}
    agent = run_agent(controller.url, extra_env=env, run="echo started", checkpoint_store=f"slow://{tmp_path / 's'}")
    assert agent.wait() == 0
    assert [r.body["source"] for r in controller.of("notice")] == ["local-metadata"]
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
    assert "started" not in controller.log_text()


HANGING_COPY = """
import os, time
from pathlib import Path
import fsspec
from fsspec.implementations.local import LocalFileSystem

class HangingCopy(LocalFileSystem):
    protocol = "hangcopy"
    def size(self, path):
        Path(os.environ["COPYING"]).touch()
        while os.path.exists(os.environ["HANG"]):
            time.sleep(0.05)  # a checkpoint's file that takes longer to copy down than the notice leaves
        return super().size(path)

fsspec.register_implementation("hangcopy", HangingCopy, clobber=True)
"""


def test_a_notice_during_a_restore_longer_than_the_notice_is_told_at_once_and_ends_the_restore(
    controller, run_agent, tmp_path
):
    """The notice was told only once the restore was done: with a restore longer than the notice, the controller
    never heard of it in time."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(HANGING_COPY)
    store, hang, metadata, copying = tmp_path / "store", tmp_path / "hang", tmp_path / "metadata", tmp_path / "copying"
    write_committed_checkpoint(store, 3)
    hang.touch()  # never removed: the copy never ends
    env = {"PYTHONPATH": f"{plugin}:{':'.join(sys.path)}", "HANG": str(hang), "SPOTRUN_LOCAL_METADATA": str(metadata),
           "COPYING": str(copying)}
    agent = run_agent(controller.url, extra_env=env, run="echo started", checkpoint_store=f"hangcopy://{store}")
    controller.wait_for(lambda: controller.of("started"))
    controller.wait_for(lambda: copying.exists())  # the restore is stuck copying
    announce_reclaim(metadata, in_seconds=30)
    controller.wait_for(lambda: controller.of("notice"), timeout=3)
    controller.wait_for(lambda: controller.of("exit"), timeout=5)
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
    assert agent.wait(timeout=10) == 0
    assert "started" not in controller.log_text()


def test_a_sigterm_after_the_clouds_notice_brings_the_stop_forward(controller, run_agent, tmp_path):
    """The cloud's notice left 30 s; then the agent's own SIGTERM (Kubernetes' grace, say) left 1.5 s. The agent
    kept to the first notice's deadline and was killed before it backed up or reported."""
    metadata = tmp_path / "metadata"
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    agent = run_agent(controller.url, run=write_trainer(tmp_path, stubborn), notice_grace=1.5, sync_margin=0.5,
                      extra_env={"SPOTRUN_LOCAL_METADATA": str(metadata)})
    wait_for_output(controller, agent, "ready")
    announce_reclaim(metadata, in_seconds=30)
    controller.wait_for(lambda: controller.of("notice"))
    agent.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert agent.wait() == 0
    assert time.monotonic() - started < 10
    assert exit_body(controller)["outcome"] == "preempted" and exit_body(controller)["exit_code"] == -signal.SIGKILL


def test_a_malformed_cloud_setting_fails_the_attempt_saying_why_instead_of_a_silent_agent(controller, run_agent):
    """The agent exited 1 before telling the controller anything: an attempt that never reported in."""
    agent = run_agent(controller.url, run="echo never",
                      extra_env={"SPOTRUN_CLOUD": "azure", "SPOTRUN_AZURE_ACKNOWLEDGE_PREEMPT": "maybe"})
    assert agent.wait() == 0
    assert [r.endpoint for r in controller.requests][0] == "started"
    assert exit_body(controller) == {
        "outcome": "failed", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
    assert "cannot watch for preemption notices" in controller.log_text() and "never" not in controller.log_text()


def test_a_checkpoint_dir_of_a_user_the_instance_lacks_fails_the_attempt_saying_why(controller, run_agent):
    """`~nosuchuser/ckpts`: the agent died building itself, before telling the controller anything."""
    agent = run_agent(controller.url, run="echo never", checkpoint_dir="~spotrun-no-such-user/ckpts")
    assert agent.wait() == 0
    assert [r.endpoint for r in controller.requests][0] == "started"
    assert exit_body(controller) == {
        "outcome": "failed", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
    said = controller.log_text()
    assert "checkpoint.dir: '~spotrun-no-such-user/ckpts' starts with ~spotrun-no-such-user" in said, said
    assert "never" not in said


def test_an_agent_older_than_its_controller_fails_the_attempt_saying_why(controller, run_agent):
    """A setting only a newer spotrun knows: the agent exited 2 before telling the controller anything."""
    agent = run_agent(controller.url, run="echo never", a_future_setting=True)
    assert agent.wait() == 0
    assert [r.endpoint for r in controller.requests][0] == "started"
    assert exit_body(controller) == {
        "outcome": "failed", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
    assert "does not know the settings a_future_setting" in controller.log_text()
    assert "never" not in controller.log_text()


def _gang_order(state: str, **extra) -> dict:
    order = {"generation": 1, "state": state, "master_addr": "127.0.0.1", "master_port": free_port(), "node_rank": 1,
             "nnodes": 2}
    return {"gang": {**order, **extra}}


FINISHING_TRAINER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # its loop is done: the final save and evaluation end at 0
print("ready", flush=True)
time.sleep(60)
"""


def test_a_gang_node_noticed_mid_generation_still_reports_how_its_command_ended(controller, run_agent, tmp_path):
    """Its exit code was lost: a generation whose every rank exited 0 was taken as interrupted and run again."""
    controller.replies["heartbeat"] = _gang_order("running")
    gang = {"nnodes": 2, "node_rank": 1}
    agent = run_agent(controller.url, run=write_trainer(tmp_path, FINISHING_TRAINER), gang=gang, notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert [r.body for r in controller.of("generation_exit")] == [{"generation": 1, "exit_code": 0}]
    endpoints = [r.endpoint for r in controller.requests]
    assert endpoints.index("generation_exit") < endpoints.index("exit")


def test_a_gang_nodes_setup_that_exits_0_after_the_notice_is_preempted_not_succeeded(controller, run_agent, tmp_path):
    """As for a single node: the setup's 0 on the SIGTERM was reported as the node's attempt succeeded."""
    controller.replies["heartbeat"] = _gang_order("running")
    marker = tmp_path / "run-started"
    setup = "trap 'exit 0' TERM; echo ready; sleep 60 & wait"
    agent = run_agent(controller.url, setup=setup, run=f"touch {marker}", gang={"nnodes": 2, "node_rank": 1},
                      notice_grace=5.0)
    wait_for_output(controller, agent, "ready")
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert exit_body(controller)["outcome"] == "preempted"
    assert controller.of("generation_exit") == [] and not marker.exists()


def test_a_noticed_gang_nodes_reports_wait_for_logs_no_longer_than_the_notice_leaves(controller, run_agent, tmp_path):
    """The generation's exit waited 10 s for the log whatever the notice left: a controller taking no log chunks held
    a noticed node's exit report past its SIGTERM's 3 s."""
    controller.replies["heartbeat"] = _gang_order("running")
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SAVING_TRAINER), gang={"nnodes": 2, "node_rank": 1},
                      notice_grace=3.0, sync_margin=0.5, log_flush_timeout=LOG_FLUSH_PAST_THE_BOUND)
    controller.wait_for(lambda: "ready" in controller.log_text())
    controller.fail_before["logs"] = 10**6  # from now on every log chunk is answered 503 ("got SIGTERM" waits)
    sent = time.monotonic()
    agent.process.send_signal(signal.SIGTERM)
    controller.wait_for(lambda: controller.of("exit"), timeout=15)
    assert time.monotonic() - sent < 6
    assert [r.body for r in controller.of("generation_exit")] == [{"generation": 1, "exit_code": 75}]
    agent.process.kill()


def test_a_stopping_gang_gives_its_ranks_until_the_noticed_nodes_deadline(controller, run_agent, tmp_path):
    """The ranks were killed notice_grace after the stop whatever the notice said: mid-save, on a 120 s notice."""
    controller.replies["heartbeat"] = _gang_order("running")
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    agent = run_agent(controller.url, run=write_trainer(tmp_path, stubborn), gang={"nnodes": 2, "node_rank": 1},
                      notice_grace=0.5, sync_margin=0.5)
    wait_for_output(controller, agent, "ready")
    stopped_at = time.time()
    controller.replies["heartbeat"] = _gang_order("stopping", stop_by=stopped_at + 2.5)
    controller.wait_for(lambda: controller.of("generation_exit"), timeout=15)
    assert time.time() - stopped_at >= 1.5  # killed at stop_by less the sync margin (2 s), not 0.5 s after the stop
    assert controller.of("generation_exit")[0].body == {"generation": 1, "exit_code": -signal.SIGKILL}
    agent.process.kill()


def test_a_notice_to_a_gang_node_while_its_generation_stops_is_told_at_once_and_kept_to(
    controller, run_agent, tmp_path
):
    """The stop waited for the ranks until the generation's stop time whatever came meanwhile: this node's own notice,
    leaving 3 s, was told only after the 20 s the stop gave, past the cloud's deadline."""
    controller.replies["heartbeat"] = _gang_order("running")
    metadata = tmp_path / "metadata"
    stubborn = ("import signal, time\nsignal.signal(signal.SIGTERM, lambda *_: print('got SIGTERM', flush=True))\n"
                "print('ready', flush=True)\ntime.sleep(60)\n")
    agent = run_agent(controller.url, run=write_trainer(tmp_path, stubborn), gang={"nnodes": 2, "node_rank": 1},
                      notice_grace=0.5, sync_margin=1.0, extra_env={"SPOTRUN_LOCAL_METADATA": str(metadata)})
    wait_for_output(controller, agent, "ready")
    controller.replies["heartbeat"] = _gang_order("stopping", stop_by=time.time() + 20)
    wait_for_output(controller, agent, "got SIGTERM")
    reclaim_at = announce_reclaim(metadata, in_seconds=3)
    controller.wait_for(lambda: controller.of("notice"), timeout=2.5)
    controller.wait_for(lambda: controller.of("exit"), timeout=25)
    assert time.time() < reclaim_at.timestamp()
    assert [r.body for r in controller.of("generation_exit")] == [{"generation": 1, "exit_code": -signal.SIGKILL}]
    assert [n.body["source"] for n in controller.of("notice")] == ["local-metadata"]
    assert exit_body(controller)["outcome"] == "preempted"
    assert agent.wait() == 0


STALLING_UPLOAD = """
import os, time
from pathlib import Path
import fsspec
from fsspec.implementations.local import LocalFileSystem

class StallingStore(LocalFileSystem):
    protocol = "stall"
    def put_file(self, lpath, rpath, **kwargs):
        Path(os.environ["UPLOADING"]).touch()
        while not os.path.exists(os.environ["RELEASE"]):
            time.sleep(0.05)  # a large upload, slower than the notice leaves
        return super().put_file(lpath, rpath, **kwargs)

fsspec.register_implementation("stall", StallingStore, clobber=True)
"""

SAVING_THEN_DONE = SAVING_TRAINER.replace("signal.signal(signal.SIGTERM, save_and_exit)", """
print("ready", flush=True)
try:
    save_and_exit(None, None)
except SystemExit:
    sys.exit(0)
""")


def _agent_on_a_stalling_store(run_agent, controller, tmp_path: Path, trainer: str, **config):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(STALLING_UPLOAD)
    metadata, uploading = tmp_path / "metadata", tmp_path / "uploading"
    env = {"PYTHONPATH": f"{plugin}:{':'.join(sys.path)}", "SPOTRUN_LOCAL_METADATA": str(metadata),
           "UPLOADING": str(uploading), "RELEASE": str(tmp_path / "release")}
    agent = run_agent(controller.url, extra_env=env, run=write_trainer(tmp_path, trainer), sync_margin=0.5,
                      checkpoint_store=f"stall://{tmp_path / 'store'}", sync_interval=3600, **config)
    return agent, metadata, uploading


def _when_uploading(controller, uploading: Path) -> None:
    controller.wait_for(lambda: uploading.exists(), timeout=30)


def test_a_sigterm_during_the_final_backup_brings_its_deadline_forward(controller, run_agent, tmp_path):
    """The final backup's deadline was fixed as it started (the cloud's, 60 s off): a SIGTERM then, leaving 2 s, was
    not kept to, and the agent was killed before it reported the exit."""
    agent, metadata, uploading = _agent_on_a_stalling_store(run_agent, controller, tmp_path, SAVING_TRAINER,
                                                            notice_grace=2.0)
    wait_for_output(controller, agent, "ready")
    announce_reclaim(metadata, in_seconds=60)
    _when_uploading(controller, uploading)
    agent.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    controller.wait_for(lambda: controller.of("exit"), timeout=20)
    assert time.monotonic() - started < 8
    assert exit_body(controller) == {
        "outcome": "preempted", "exit_code": 75, "checkpoint_synced": False, "nothing_to_back_up": False,
    }
    assert [n.body["source"] for n in controller.of("notice")] == ["local-metadata"]
    assert agent.wait() == 0


def test_a_clouds_notice_during_the_final_backup_of_a_finished_run_is_told_and_bounds_it(
    controller, run_agent, tmp_path
):
    """A run that ended on its own backs up with no deadline: a notice that came during that backup was never told
    to the controller, and the backup ran past the cloud's deadline."""
    agent, metadata, uploading = _agent_on_a_stalling_store(run_agent, controller, tmp_path, SAVING_THEN_DONE)
    _when_uploading(controller, uploading)
    reclaim_at = announce_reclaim(metadata, in_seconds=3)
    controller.wait_for(lambda: controller.of("exit"), timeout=20)
    assert time.time() < reclaim_at.timestamp()
    assert exit_body(controller) == {
        "outcome": "succeeded", "exit_code": 0, "checkpoint_synced": False, "nothing_to_back_up": False,
    }
    assert [n.body["source"] for n in controller.of("notice")] == ["local-metadata"]
    assert agent.wait() == 0


def test_a_store_that_hangs_after_a_normal_exit_holds_the_exit_report_no_longer_than_the_backups_limit(
    controller, run_agent, tmp_path
):
    """With no notice, the final backup had no deadline: a store that stopped answering held the exit report for
    ever."""
    agent, _, uploading = _agent_on_a_stalling_store(run_agent, controller, tmp_path, SAVING_THEN_DONE,
                                                     final_backup_timeout=1.0)
    _when_uploading(controller, uploading)
    started = time.monotonic()
    controller.wait_for(lambda: controller.of("exit"), timeout=15)
    assert time.monotonic() - started < 6
    assert exit_body(controller) == {
        "outcome": "succeeded", "exit_code": 0, "checkpoint_synced": False, "nothing_to_back_up": False,
    }
    assert agent.wait() == 0


SAVING_75 = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))  # the SDK's "saved after a stop request, resume me"
print("ready", flush=True)
time.sleep(120)
"""


def test_a_noticed_gang_node_under_torchrun_reports_its_ranks_saved_not_failed(controller, run_agent, tmp_path):
    """torchrun ends 1 when a worker ends 75: a noticed node reported its generation's command failed."""
    order = _gang_order("running", node_rank=0, nnodes=1)  # one node's torchrun: its worker starts without a peer
    controller.replies["heartbeat"] = order
    agent = run_agent(controller.url, run=write_trainer(tmp_path, SAVING_75), notice_grace=10.0,
                      gang={"nnodes": 2, "node_rank": 0, "launcher": "torchrun"})
    wait_for_output(controller, agent, "ready", timeout=60)
    agent.process.send_signal(signal.SIGTERM)  # the agent's own notice
    assert agent.wait() == 0
    assert [r.body for r in controller.of("generation_exit")] == [{"generation": 1, "exit_code": 75}]
