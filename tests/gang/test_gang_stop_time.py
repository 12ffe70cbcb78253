"""When a gang node kills its ranks after a notice: the deadline less its exit report's time, not less the sync
margin, which a single node keeps for its final backup (a gang node makes none: the ranks write to the store)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from spotrun.agent.config import AgentConfig
from spotrun.agent.gang import GangAgent
from spotrun.agent.notices import Notice
from spotrun.agent.supervisor import EXIT_REPORT_SECONDS, Agent

GANG = {"nnodes": 2, "node_rank": 1}
LARGE_SYNC_MARGIN = 10.0  # set for a single node's large final backup; a gang node has nothing to back up


class SavingRanks:
    """A node's command that keeps saving past SIGTERM, until SIGKILL."""

    def __init__(self) -> None:
        self.signals: list[signal.Signals] = []
        self.killed_at: float | None = None
        self._killed = threading.Event()

    def signal_group(self, signum: signal.Signals) -> None:
        self.signals.append(signum)
        if signum == signal.SIGKILL and self.killed_at is None:
            self.killed_at = time.time()
            self._killed.set()

    def wait(self, timeout: float | None = None) -> int | None:
        return -signal.SIGKILL if self._killed.wait(timeout) else None

    def group_alive(self) -> bool:
        return not self._killed.is_set()

    def drain_output(self, timeout: float) -> bool:
        return True


def config(tmp_path: Path, **overrides) -> AgentConfig:
    return AgentConfig.model_validate({
        "controller_url": "http://127.0.0.1:9", "token": "t", "job_id": 7, "attempt_id": 11, "attempt_number": 0,
        "run": "true", "checkpoint_dir": str(tmp_path / "ckpts"), "checkpoint_store": str(tmp_path / "store"),
        **overrides,
    })


@pytest.mark.parametrize(("sync_margin", "margin"), [
    (LARGE_SYNC_MARGIN, EXIT_REPORT_SECONDS),
    (2.0, 2.0),  # the default: all of it is the report's (a single node's backup is cut EXIT_REPORT_SECONDS before)
    (0.5, 0.5),  # set smaller than the report's time: kept to, as before
])
def test_a_noticed_gang_node_keeps_only_its_exit_reports_time_before_the_deadline(tmp_path, sync_margin, margin):
    deadline = time.time() + 120  # an EC2 notice
    notice = Notice("aws", deadline, "spot interruption notice")
    gang = GangAgent(config(tmp_path, sync_margin=sync_margin, gang=GANG), [])
    single = Agent(config(tmp_path, sync_margin=sync_margin), [])
    assert gang._stop_times(notice).stop_by() == deadline - margin
    assert single._stop_times(notice).stop_by() == deadline - sync_margin  # its final backup's time, as set


def test_a_noticed_gang_nodes_ranks_are_killed_at_the_deadline_less_the_exit_report(tmp_path):
    """They were killed the sync margin before it, time kept for a final backup a gang node does not make: at once
    on a notice leaving less, with the ranks' save cut short."""
    agent = GangAgent(config(tmp_path, sync_margin=LARGE_SYNC_MARGIN, gang=GANG), [])
    ranks = SavingRanks()
    deadline = time.time() + EXIT_REPORT_SECONDS + 1.0
    report = agent._answer_notice(ranks, Notice("aws", deadline, "spot interruption notice"))  # type: ignore[arg-type]
    assert (report.outcome, report.exit_code) == ("preempted", -signal.SIGKILL)
    assert ranks.signals[:2] == [signal.SIGTERM, signal.SIGKILL]
    assert ranks.killed_at is not None
    assert deadline - EXIT_REPORT_SECONDS - 0.05 <= ranks.killed_at <= deadline - EXIT_REPORT_SECONDS + 0.5


def test_a_stopping_generations_ranks_are_killed_with_the_noticed_nodes(tmp_path):
    """Every node of the stopping generation kills its ranks when the noticed node kills its own: the save ends
    together, at the noticed node's deadline less the exit report's time, not less the sync margin."""
    agent = GangAgent(config(tmp_path, notice_grace=0.5, sync_margin=LARGE_SYNC_MARGIN, gang=GANG), [])
    stop_by = time.time() + EXIT_REPORT_SECONDS + 1.5
    agent.orders.on_heartbeat_reply({"gang": {
        "generation": 1, "state": "stopping", "master_addr": "127.0.0.1", "master_port": 29500, "node_rank": 1,
        "nnodes": 2, "stop_by": stop_by,
    }})
    ranks = SavingRanks()
    assert agent._stop(ranks) == -signal.SIGKILL  # type: ignore[arg-type]
    assert ranks.killed_at is not None
    assert stop_by - EXIT_REPORT_SECONDS - 0.05 <= ranks.killed_at <= stop_by - EXIT_REPORT_SECONDS + 0.5
