"""A command that SIGKILL does not end (stuck in the kernel, in uninterruptible sleep): the agent waits for it a
moment only, then answers the notice or the generation's stop without its exit code."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from spotrun.agent import supervisor
from spotrun.agent.config import AgentConfig
from spotrun.agent.gang import GangAgent
from spotrun.agent.notices import Notice
from spotrun.agent.supervisor import Agent

from .conftest import agent_config


class UnkillableProcess:
    """A command's stand-in that ignores every signal until released (a process in D state cannot be made here)."""

    def __init__(self) -> None:
        self.signals: list[signal.Signals] = []
        self.killed_at: float | None = None
        self.waited_until: list[float] = []  # the latest time each wait (for its exit, its output) could last to
        self.released = threading.Event()

    def signal_group(self, signum: signal.Signals) -> None:
        self.signals.append(signum)
        if signum == signal.SIGKILL and self.killed_at is None:
            self.killed_at = time.time()

    def wait(self, timeout: float | None = None) -> int | None:
        self.waited_until.append(time.time() + (60 if timeout is None else timeout))
        self.released.wait(60 if timeout is None else timeout)
        return -signal.SIGKILL if self.released.is_set() else None

    def group_alive(self) -> bool:
        return not self.released.is_set()

    def drain_output(self, timeout: float) -> bool:
        self.waited_until.append(time.time() + timeout)
        return self.released.wait(timeout)  # a process stuck in the kernel keeps its end of the pipe open


def in_a_thread(call, timeout: float) -> list:
    """call()'s result, in a list that stays empty when it had not returned after timeout."""
    returned: list = []
    thread = threading.Thread(target=lambda: returned.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    return returned


@pytest.fixture(autouse=True)
def short_wait_after_sigkill(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent waits KILLED_EXIT_SECONDS (2 s) for a SIGKILLed command; what is checked here is that the wait ends,
    not its length."""
    monkeypatch.setattr(supervisor, "KILLED_EXIT_SECONDS", 0.5)


def config(tmp_path: Path, **overrides) -> AgentConfig:
    return AgentConfig.model_validate(
        agent_config("http://127.0.0.1:9", tmp_path / "store", checkpoint_dir=str(tmp_path / "ckpts"), **overrides)
    )


def test_a_noticed_command_that_sigkill_does_not_end_does_not_hold_the_exit_past_the_deadline(tmp_path):
    """After SIGKILL the agent waited for the command without a bound, past the notice's deadline."""
    agent = Agent(config(tmp_path, notice_grace=1.0, sync_margin=0.5), [])
    process = UnkillableProcess()
    notice = Notice("sigterm", time.time() + 1.0, "SIGTERM received by the agent", own_grace=True)
    try:
        returned = in_a_thread(lambda: agent._answer_notice(process, notice), timeout=8)
    finally:
        process.released.set()
    assert returned, "the agent still waits for a command SIGKILL cannot end"
    assert (returned[0].outcome, returned[0].exit_code) == ("preempted", None)
    assert process.signals[:2] == [signal.SIGTERM, signal.SIGKILL]


def test_waiting_for_a_command_stuck_after_sigkill_leaves_the_final_backup_its_time_before_the_deadline(tmp_path, monkeypatch):
    """With the default sync margin (2 s) the agent waited 2 s for the SIGKILLed command's exit, then 2 s for its
    output, from 2 s before the cloud's deadline: the final backup started at the deadline, and the exit was reported
    after it. The waits after SIGKILL now end in time for the backup's own time (1 s) and the exit report's (2 s), or
    after a moment when the deadline leaves less."""
    monkeypatch.setattr(supervisor, "KILLED_EXIT_SECONDS", 2.0)  # the real wait; the fixture shortened it
    agent = Agent(config(tmp_path, notice_grace=30.0, sync_margin=2.0), [])  # the default sync margin
    process = UnkillableProcess()
    deadline = time.time() + 2.5
    notice = Notice("aws", deadline, "spot interruption notice")
    try:
        returned = in_a_thread(lambda: agent._answer_notice(process, notice), timeout=8)
    finally:
        process.released.set()
    assert returned and returned[0].outcome == "preempted"
    assert process.killed_at is not None and process.killed_at >= deadline - agent.config.sync_margin - 0.05
    start_backup_by = deadline - supervisor.EXIT_REPORT_SECONDS - supervisor.MIN_BACKUP_SECONDS
    waits_after_kill = [until for until in process.waited_until if until > process.killed_at]
    latest_allowed = max(start_backup_by, process.killed_at) + 0.5  # two moments: for the exit, for the output
    assert waits_after_kill and max(waits_after_kill) <= latest_allowed, (
        f"waited for the stopped command until {max(waits_after_kill) - deadline:+.2f} s from the deadline")


def test_a_stopping_generations_command_that_sigkill_does_not_end_is_reported_without_its_exit_code(tmp_path):
    """The gang node waited for it without a bound: its generation's exit was never reported, nor a later notice."""
    agent = GangAgent(config(tmp_path, notice_grace=0.5, gang={"nnodes": 2, "node_rank": 1}), [])
    process = UnkillableProcess()
    try:
        returned = in_a_thread(lambda: agent._stop(process), timeout=8)
    finally:
        process.released.set()
    assert returned == [None], "the agent still waits for a command SIGKILL cannot end"
    assert process.signals == [signal.SIGTERM, signal.SIGKILL]
