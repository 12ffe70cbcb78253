"""An instance gone without a stated end while the controller was down is billed at least to the newest backup its
agent made to the job's checkpoint store (`control.backup_evidence`, `sdk.backup_marks`): the agent ran on unheard."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from world import SPEC

from spotrun.agent.checkpoint_sync import CheckpointSync
from spotrun.control import backup_evidence
from spotrun.sdk.backup_marks import MARKS_FOLDER, BackupWriter
from spotrun.sdk.layout import MANIFEST_NAME, checkpoint_name
from spotrun.sdk.locations import url_to_fs
from spotrun.spec import JobSpec
from spotrun.state import Instance, Job

PATIENT_SPEC = SPEC.replace("max_wait: 2h", "max_wait: 12h")  # the outage does not end the job


def store_root(world, job_id: int) -> Path:
    with world.store.session() as session:
        url = JobSpec.stored(session.get(Job, job_id).spec).checkpoint.store
    return Path(url_to_fs(url)[1])


def back_up_as(world, job_id: int, attempt_id: int, tmp_path: Path, at: float) -> None:
    """The attempt's agent backs a checkpoint up to the job's store, the store dating the write `at`."""
    local = tmp_path / f"disk-{attempt_id}"
    folder = local / checkpoint_name(1)
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"weights")
    (folder / MANIFEST_NAME).write_text('{"step": 1, "files": {"model.bin": {"size": 7}}}')
    writer = BackupWriter(job_id, attempt_id)
    root = store_root(world, job_id)
    assert CheckpointSync(local, str(root), writer=writer).backup() is True
    os.utime(writer.mark_path(str(root)), (at, at))


def heard_then_silent(world) -> tuple[int, str, int, float]:
    """A job whose agent is last heard of 600 s into its run; (job, instance, attempt id, last heartbeat)."""
    job_id = world.submit(PATIENT_SPEC)
    instance = world.run_to_running(job_id)
    world.clock.advance(600)
    world.agent(instance)("heartbeat", {})
    [attempt] = world.attempts(job_id)
    return job_id, instance, attempt.id, world.clock.now()


def gone_unstated_after_an_outage(world, instance: str) -> None:
    """The controller is down three hours; the cloud takes the instance and forgets when (Azure's Delete policy)."""
    world.clock.advance(3 * 3600)
    world.cloud.instances[instance] = replace(
        world.cloud.instances[instance], state="terminated", reclaimed=True, terminated_at=None)
    world.controller = world.new_controller(heartbeat_timeout=45.0)
    world.tick()


def test_an_instance_that_backed_up_unheard_through_an_outage_is_billed_to_its_newest_backup(world, tmp_path):
    job_id, instance, attempt_id, last_heard = heard_then_silent(world)
    back_up_as(world, job_id, attempt_id, tmp_path, at=last_heard + 2 * 3600)
    gone_unstated_after_an_outage(world, instance)
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "preempted"
    assert attempt.ended_at == last_heard + 2 * 3600
    assert attempt.billed_seconds == pytest.approx(last_heard + 2 * 3600 - attempt.started_at, abs=1e-6)
    with world.store.session() as session:
        assert session.get(Instance, instance).terminated_at == last_heard + 2 * 3600


def test_another_attempts_backup_says_nothing_of_this_instance(world, tmp_path):
    job_id, instance, attempt_id, last_heard = heard_then_silent(world)
    back_up_as(world, job_id, attempt_id + 1, tmp_path, at=last_heard + 2 * 3600)
    gone_unstated_after_an_outage(world, instance)
    [attempt, *_] = world.attempts(job_id)
    assert attempt.ended_at == last_heard + 45.0  # as before: when it would have been lost


def test_a_lost_instance_the_cloud_forgot_is_billed_to_its_newest_backup(world, tmp_path):
    job_id, instance, attempt_id, last_heard = heard_then_silent(world)
    back_up_as(world, job_id, attempt_id, tmp_path, at=last_heard + 3600)
    world.clock.advance(3 * 3600)
    world.cloud.forget(instance)  # EC2 no longer lists it
    world.controller = world.new_controller(heartbeat_timeout=60.0, unknown_timeout=60.0)
    for _ in range(3):  # the restarted controller gives the silent instance its timeout first
        world.tick(61)
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "lost"
    assert attempt.ended_at == last_heard + 3600


def test_a_store_that_cannot_be_read_leaves_the_bill_as_before_and_says_so_once(world, tmp_path, caplog):
    job_id, instance, attempt_id, last_heard = heard_then_silent(world)
    root = store_root(world, job_id)
    root.mkdir(parents=True)
    (root / MARKS_FOLDER).write_text("a file where the marks' folder goes: reading a mark fails")
    with caplog.at_level(logging.INFO, logger="spotrun.controller"):
        gone_unstated_after_an_outage(world, instance)
        world.tick()
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "preempted" and attempt.ended_at == last_heard + 45.0
    told = [r for r in caplog.records if f"attempt {attempt_id}'s backups" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.WARNING and "cannot look for" in told[0].getMessage()


def test_a_store_that_does_not_answer_is_waited_for_no_longer_than_the_timeout(monkeypatch, caplog):
    answer = threading.Event()

    class HangingStore:
        def invalidate_cache(self, path=None):
            pass

        def info(self, path):
            answer.wait(10)
            raise AssertionError("answered after the controller had given up")

    monkeypatch.setattr(backup_evidence, "url_to_fs", lambda url, options=None: (HangingStore(), "bucket/job"))
    try:
        assert backup_evidence.newest_backup_at("s3://bucket/job", BackupWriter(1, 2), timeout=0.05) is None
    finally:
        answer.set()
    assert "no answer within" in caplog.text


def test_a_job_without_a_store_on_record_is_not_looked_for():
    assert backup_evidence.newest_backup_at(None, BackupWriter(1, 2), timeout=1.0) is None
