"""An attempt the controller is ending (its gang succeeded, its job was cancelled) has its instance terminated, and
its agent gets a SIGTERM and says so: that is not a preemption. Every node of a multi-node job that had just
succeeded read "preemption notice from sigterm" and "command preempted" in its events."""

from __future__ import annotations

from spotrun.control.observe import Verdict
from spotrun.state import Event


def events_of(world, attempt_id: int) -> list[str]:
    with world.store.session() as session:
        return [e.message for e in session.query(Event).filter_by(attempt_id=attempt_id).order_by(Event.id)]


def ending(world) -> tuple[int, str]:
    """A running job whose attempt the controller has begun to end (its instance about to be terminated); the job's
    id and the instance."""
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.controller.begin_end(world.attempts(job_id)[0].id, Verdict("cancelled", "cancelled by the user"))
    return job_id, instance


def test_the_agents_sigterm_as_its_attempt_ends_is_no_preemption_notice(world):
    job_id, instance = ending(world)
    agent = world.agent(instance)
    agent("notice", {"source": "sigterm", "deadline": world.clock.now() + 30})
    agent("exit", {"outcome": "preempted", "exit_code": None, "checkpoint_synced": True})

    [attempt] = world.attempts(job_id)
    messages = events_of(world, attempt.id)
    assert not [m for m in messages if "preemption notice" in m or "command preempted" in m], messages
    assert any("agent stopped as the attempt ended; checkpoints backed up" in m for m in messages), messages
    assert (attempt.notice_at, attempt.notice_source) == (None, None)


def test_a_command_killed_by_the_stop_of_a_cancel_did_not_fail(world):
    """A trainer that does not catch SIGTERM dies of it (exit code -15): its job's cancel read "command failed"."""
    job_id, instance = ending(world)
    world.agent(instance)("notice", {"source": "sigterm", "deadline": world.clock.now() + 30})
    world.agent(instance)("exit", {"outcome": "failed", "exit_code": -15, "checkpoint_synced": True})

    messages = events_of(world, world.attempts(job_id)[0].id)
    assert not [m for m in messages if "command failed" in m], messages
    assert any("agent stopped as the attempt ended (exit code -15); checkpoints backed up" in m for m in messages)


def test_a_running_commands_failure_still_reads_failed(world):
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.agent(instance)("exit", {"outcome": "failed", "exit_code": -9, "checkpoint_synced": True})
    messages = events_of(world, world.attempts(job_id)[0].id)
    assert any("command failed (exit code -9)" in m for m in messages), messages


def test_a_clouds_notice_as_its_attempt_ends_is_still_its_notice(world):
    """The cloud's notice says whether the instance is left to the cloud (`control.reclaims`): kept."""
    job_id, instance = ending(world)
    world.agent(instance)("notice", {"source": "local-metadata", "deadline": world.clock.now() + 30})
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})

    messages = events_of(world, world.attempts(job_id)[0].id)
    assert any("preemption notice from local-metadata" in m for m in messages), messages
    assert any("command preempted (exit code 75)" in m for m in messages), messages


def test_an_exit_with_nothing_to_back_up_says_nothing_of_checkpoints(world):
    """A job that saves no checkpoints (a gang's node, whose ranks write to the store themselves, alike) was told its
    checkpoints were backed up at each exit."""
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.agent(instance)("exit", {"outcome": "failed", "exit_code": 3, "checkpoint_synced": True,
                                   "nothing_to_back_up": True})

    messages = events_of(world, world.attempts(job_id)[0].id)
    assert "attempt 1: command failed (exit code 3)" in messages, messages
    assert not [m for m in messages if "backed up" in m], messages


def test_an_exit_with_checkpoints_says_whether_they_were_backed_up(world):
    for synced, words in ((True, "checkpoints backed up"), (False, "checkpoints NOT backed up")):
        job_id = world.submit()
        instance = world.run_to_running(job_id)
        world.agent(instance)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": synced,
                                       "nothing_to_back_up": False})

        messages = events_of(world, world.attempts(job_id)[0].id)
        assert f"attempt 1: command succeeded (exit code 0); {words}" in messages, messages


def test_an_exit_without_an_exit_code_does_not_read_exit_code_none(world):
    """A notice before the command started (or while its checkpoints were restored) leaves no exit code: the event,
    which `launch --follow` shows, read "command preempted (exit code None)"."""
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.agent(instance)("notice", {"source": "local-metadata", "deadline": world.clock.now() + 30})
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": None, "checkpoint_synced": False})

    messages = events_of(world, world.attempts(job_id)[0].id)
    assert any(m.startswith("attempt 1: command preempted") for m in messages), messages
    assert not [m for m in messages if "None" in m], messages
