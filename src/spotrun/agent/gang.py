"""The agent of one node of a multi-node job.

It reports in with its address and a free port, then follows the controller's orders, which come in every
heartbeat's answer: run the command for generation g (with g's master address) while g is "running", stop it
(SIGTERM, then SIGKILL after the grace) once g is "stopping" or "ended", report how each generation's command
exited, and wait for the next. The node outlives its generations; only a preemption notice (or a stop asked by
the controller) ends the attempt. The trainers read and write checkpoints in the shared store directly, so
nothing is restored or backed up here.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from spotrun.agent.config import AgentConfig, GangConfig
from spotrun.agent.heartbeat import CheckpointProgress, Heartbeat
from spotrun.agent.notices import Notice, NoticeSource
from spotrun.agent.process import CommandProcess
from spotrun.agent.stop_times import StopTimes
from spotrun.agent.supervisor import (
    EXIT_REPORT_SECONDS,
    OUTPUT_DRAIN_SECONDS,
    WAIT_STEP_SECONDS,
    Agent,
    ExitReport,
    instance_address,
    trainer_environment,
)
from spotrun.pydantic_messages import error_message
from spotrun.sdk import PREEMPTED_EXIT_CODE

log = logging.getLogger(__name__)

STORE_STEP_EVERY = 5.0  # node 0 lists the store for the newest committed step at most this often


MAX_WARNED_ORDERS = 100  # distinct malformed orders remembered, so that each is warned of once


class MalformedOrder(ValueError):
    """A generation order that cannot be followed (a controller bug, a version skew); the message names what is
    wrong."""


class GenerationOrder(BaseModel):
    """One generation's order, as a heartbeat answer's `gang` carries it (`spotrun.control.gang.assignment`)."""

    model_config = ConfigDict(frozen=True, strict=True, populate_by_name=True, allow_inf_nan=False)

    number: int = Field(alias="generation", ge=1)
    state: Literal["running", "stopping", "ended"]
    master_addr: str = Field(min_length=1)
    master_port: int = Field(ge=1, le=65535)
    node_rank: int = Field(ge=0)
    nnodes: int = Field(ge=1)
    stop_by: float | None = None  # a stopping generation: when the cloud takes a noticed node (unix seconds)

    @model_validator(mode="after")
    def _rank_in_the_world(self) -> GenerationOrder:
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} is outside a world of {self.nnodes} nodes")
        return self

    @classmethod
    def from_reply(cls, gang: Any) -> GenerationOrder | None:
        """The order; None for the controller's "no order" (this node waits for, or is not in, the newest
        generation). Raises MalformedOrder, naming what is wrong, for anything else."""
        if gang is None:
            return None
        if not isinstance(gang, dict):
            raise MalformedOrder(f"`gang` must be an object, got {gang!r}")
        try:
            return cls.model_validate(gang)
        except ValidationError as exc:
            raise MalformedOrder("; ".join(_problem(error) for error in exc.errors())) from None

    @property
    def running(self) -> bool:
        return self.state == "running"


def _problem(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"])
    return f"{field}: {error_message(error)}" if field else error_message(error)


class GangOrders:
    """The newest well-formed generation order seen in heartbeat answers. A malformed one is warned of (once each)
    and changes nothing: a controller's bug must not stop a healthy generation; only an order that says so does."""

    def __init__(self) -> None:
        self._order: GenerationOrder | None = None
        self._changed = threading.Condition()
        self._warned: set[str] = set()

    def on_heartbeat_reply(self, reply: dict[str, Any]) -> None:
        if "gang" not in reply:  # an answer that says nothing of the gang (one to an ended attempt: it says stop)
            return
        try:
            order = GenerationOrder.from_reply(reply["gang"])
        except MalformedOrder as exc:
            self._warn_once(reply.get("gang"), exc)
            return
        with self._changed:
            if order != self._order:
                self._order = order
                self._changed.notify_all()

    def _warn_once(self, gang: Any, problem: MalformedOrder) -> None:
        key = repr(gang)
        if key in self._warned:
            return
        if len(self._warned) < MAX_WARNED_ORDERS:
            self._warned.add(key)
        log.warning("ignoring a malformed generation order from the controller (%s): %r; the current generation "
                    "goes on", problem, gang)

    @property
    def current(self) -> GenerationOrder | None:
        with self._changed:
            return self._order

    def wait_for_new(self, after: int, timeout: float) -> GenerationOrder | None:
        """The order for a generation newer than `after` (running, or already stopping when this node comes
        late), if one comes within the timeout."""
        with self._changed:
            self._changed.wait_for(lambda: self._is_new(after), timeout)
            return self._order if self._is_new(after) else None

    def _is_new(self, after: int) -> bool:
        return self._order is not None and self._order.number > after


class Throttled:
    """`read()`'s value, read again at most every `interval` seconds (listing an object store each heartbeat
    would cost more than the news is worth)."""

    def __init__(self, read: Callable[[], CheckpointProgress | None], interval: float) -> None:
        self._read = read
        self._interval = interval
        self._value: CheckpointProgress | None = None
        self._read_at = -float("inf")

    def __call__(self) -> CheckpointProgress | None:
        if time.monotonic() - self._read_at >= self._interval:
            self._read_at = time.monotonic()
            self._value = self._read()
        return self._value


def free_port() -> int:
    """A port free on every address of this instance (the master's TCPStore listens on all of them)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def rendezvous_environment(gang: GangConfig, order: GenerationOrder) -> dict[str, str]:
    """torch.distributed's env:// settings for this node; with torchrun, it sets the per-process ones itself."""
    env = {
        "MASTER_ADDR": order.master_addr,
        "MASTER_PORT": str(order.master_port),
        "NODE_RANK": str(order.node_rank),
        "NNODES": str(order.nnodes),
        "SPOTRUN_NODE_RANK": str(order.node_rank),
        "SPOTRUN_NNODES": str(order.nnodes),
        "SPOTRUN_GENERATION": str(order.number),
    }
    if gang.launcher == "env":
        env.update(WORLD_SIZE=str(order.nnodes), RANK=str(order.node_rank), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    return env


# How long torchrun, stopped, lets its workers save before it kills them: longer than any stop time the agent gives
# (a notice's, notice_grace), which governs. torchrun's own 30 s killed ranks still saving within EC2's 2 minutes;
# at the agent's stop time it kills them itself (`CommandProcess.signal_group`).
TORCHRUN_SHUTDOWN_SECONDS = 86400


def node_command(run: str, gang: GangConfig, order: GenerationOrder) -> str:
    """The bash command this node runs for one generation."""
    if gang.launcher == "env":
        return run
    torchrun = [
        sys.executable, "-m", "spotrun.agent.torchrun_launch",  # torchrun, without its traceback when stopped
        f"--nnodes={order.nnodes}", f"--node-rank={order.node_rank}", f"--nproc-per-node={gang.procs_per_node}",
        f"--master-addr={order.master_addr}", f"--master-port={order.master_port}", "--max-restarts=0",
        f"--shutdown-timeout={TORCHRUN_SHUTDOWN_SECONDS}",
        "--no-python", sys.executable, "-m", "spotrun.agent.rank_output",  # each rank's lines whole
        "bash", "-c", run,
    ]
    return shlex.join(torchrun)


class GangAgent(Agent):
    def __init__(
        self, config: AgentConfig, notice_sources: Sequence[NoticeSource], environ: Mapping[str, str] = os.environ,
        startup_problem: str | None = None,
    ) -> None:
        if config.gang is None:
            raise ValueError("GangAgent needs a config with `gang`")
        super().__init__(config, notice_sources, environ, startup_problem)
        self.gang = config.gang
        self.orders = GangOrders()

        def on_reply(reply: dict[str, Any]) -> None:
            self.controller_stop.on_heartbeat_reply(reply)
            self.orders.on_heartbeat_reply(reply)

        every = min(config.sync_interval, STORE_STEP_EVERY)
        newest = Throttled(self._newest_store_progress, every) if config.gang.node_rank == 0 else None
        self.heartbeat = Heartbeat(self.client, config.heartbeat_interval, newest or (lambda: None), on_reply)

    def _newest_store_progress(self) -> CheckpointProgress | None:
        """Node 0's news of the checkpoints the ranks write to the store themselves (no upload: their save is all
        a notice must leave time for)."""
        self.sync.store.fs.invalidate_cache()
        progress = self.sync.store.newest_progress()
        if progress is not None:
            self.slow_saves.checked(progress.step, progress.save_seconds, 0.0)
        return progress

    def _attempt(self) -> ExitReport:
        self._report_started()
        if self.config.setup:
            report = self._run_setup()
            if report is not None:
                return report
        last_run = 0
        while True:
            order, notice = self._next_order_or_notice(last_run)
            if notice is not None:
                self._tell_notice(notice)
                return ExitReport("preempted", None, checkpoint_synced=True)
            last_run = order.number
            if not order.running:  # it stopped before this node joined it: nothing ran here
                self._report_generation_exit(order, None)
                continue
            report = self._run_generation(order)
            if report is not None:
                return report

    def _report_started(self) -> None:
        def controller_answered(delivery: Any) -> None:
            self.heartbeat.start()
            self.logs.start()

        body = {"address": instance_address(self.environ), "port": free_port()}
        self.reporter.send("started", body, on_answer=controller_answered)

    def _run_setup(self) -> ExitReport | None:
        env = trainer_environment(self.config, self.config.checkpoint_store, False, self.environ)
        process = self._new_process(self.config.setup, env)
        try:
            process.start()
        except OSError as exc:
            self._output(f"spotrun agent: cannot start the setup command: {exc}\n")
            return ExitReport("failed", None, checkpoint_synced=True)
        notice = self._wait_for_exit_or_notice(process)
        if notice is not None:
            return self._answer_notice(process, notice, ends_the_job=False)
        if process.returncode != 0:
            return ExitReport("failed", process.returncode, checkpoint_synced=True)
        return None

    def _next_order_or_notice(self, after: int) -> tuple[GenerationOrder | None, Notice | None]:
        while True:
            notice = self.notices.notice
            if notice is not None:
                return None, notice
            order = self.orders.wait_for_new(after, WAIT_STEP_SECONDS)
            if order is not None:
                return order, None

    def _kill_earlier_generations(self) -> None:
        for process in self._started[1 if self.config.setup else 0:]:  # a setup's daemons may serve every generation
            if process.group_alive():
                process.signal_group(signal.SIGKILL)

    def _run_generation(self, order: GenerationOrder) -> ExitReport | None:
        """Run one generation's command; an ExitReport when the attempt itself must end (a notice)."""
        log.info("generation %d: node %d of %d, master %s:%d", order.number, order.node_rank, order.nnodes,
                 order.master_addr, order.master_port)
        env = trainer_environment(self.config, self.config.checkpoint_store, order.number > 1, self.environ)
        env.update(rendezvous_environment(self.gang, order))
        command = node_command(self.config.run, self.gang, order)
        self._kill_earlier_generations()  # what is left of them may hold the GPU memory or ports this one needs
        process = self._new_process(command, env)
        try:
            process.start()
        except OSError as exc:
            self._output(f"spotrun agent: cannot start the run command: {exc}\n")
            self._report_generation_exit(order, 127)
            return None
        while process.wait(0) is None:
            notice = self.notices.wait(WAIT_STEP_SECONDS)
            if notice is not None:
                report = self._answer_notice(process, notice)
                # all ranks may have finished meanwhile; torchrun ends 1 on the SIGTERM, its workers' 75 included
                self._report_generation_exit(order, self._code_of_a_stop(report.exit_code))
                return report
            if self._generation_is_over(order):
                exit_code = self._stop(process)
                process.drain_output(OUTPUT_DRAIN_SECONDS)
                self._report_generation_exit(order, self._code_of_a_stop(exit_code))
                return None
        process.drain_output(OUTPUT_DRAIN_SECONDS)
        self._report_generation_exit(order, process.returncode)
        return None

    def _code_of_a_stop(self, code: int | None) -> int | None:
        """The exit code of a command this agent asked to stop. torchrun ends 1 whenever a worker ends non-zero, the
        SDK's "saved, resume me" (75) included, and says no more: a stop the agent asked for that torchrun ended so
        is taken as saved, as the controller would take 75 (a crash while stopping is resumed likewise, from the
        newest checkpoint, without counting against max_restarts_on_error)."""
        if self.gang.launcher == "torchrun" and code == 1:
            log.info("torchrun ended 1 after the stop this agent asked for: reporting %d", PREEMPTED_EXIT_CODE)
            return PREEMPTED_EXIT_CODE
        return code

    def _generation_is_over(self, order: GenerationOrder) -> bool:
        current = self.orders.current
        return current is None or current.number != order.number or not current.running

    def _stop(self, process: CommandProcess) -> int | None:
        """SIGTERM, then SIGKILL at the stop time: when the noticed node kills its ranks, `_kill_margin` before its
        deadline (the ranks' save must end together), else notice_grace from now; sooner if this node's own notice,
        told at once, comes meanwhile and leaves less. The command's exit code (None: killed, and stuck)."""
        current = self.orders.current
        stop_by = time.time() + self.config.notice_grace
        if current is not None and current.stop_by is not None:
            stop_by = max(stop_by, current.stop_by - self._kill_margin())
        log.info("generation is stopping: asking the command to checkpoint and stop within %.0f s", stop_by - time.time())
        ending = f"generation {current.number} is stopping" if current else "the generation has ended"
        self._say_stopping(ending, stop_by)
        process.signal_group(signal.SIGTERM)
        times: StopTimes | None = None
        exit_code = None
        while exit_code is None and (left := self._stop_time(times, stop_by) - time.time()) > 0:
            exit_code = process.wait(min(WAIT_STEP_SECONDS, left))
            times = self._notice_since(times)
        if exit_code is None:
            log.warning("command still running at its stop time; killing its process group")
            exit_code = self._kill(process, times)
        return exit_code

    def _kill_margin(self) -> float:
        """The sync margin's exit-report part only: after the kill a gang node makes no final backup (the ranks wrote
        to the store themselves); it reports its log, the generation's exit and its own, as the single node does in
        the last EXIT_REPORT_SECONDS. A smaller sync margin is kept to as before."""
        return min(self.config.sync_margin, EXIT_REPORT_SECONDS)

    def _report_generation_exit(self, order: GenerationOrder, exit_code: int | None) -> None:
        log.info("generation %d: command exited with %s", order.number, exit_code)
        self.logs.flush(timeout=self._log_flush_seconds())  # the controller holds the generation's log before its exit
        self.reporter.send("generation_exit", {"generation": order.number, "exit_code": exit_code})

    def _final_backup(self, times: StopTimes | None) -> bool:
        return True  # the trainers wrote to the shared store themselves

    def _nothing_to_back_up(self) -> bool:
        return True  # the trainers write to the shared store themselves
