"""The agent's main loop: restore, report started, run setup and run, answer a preemption notice, back up,
report the exit. The parts it drives live in their own modules."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from spotrun.agent.checkpoint_sync import BackupCutShort, CheckpointSync, PeriodicBackup
from spotrun.agent.client import ControllerClient, Delivery
from spotrun.agent.cloud_notices import EarlyWarning, MetadataSource
from spotrun.agent.config import CONFIG_ENV_VAR, AgentConfig
from spotrun.agent.controller_stop import ControllerStopNotice
from spotrun.agent.heartbeat import Heartbeat
from spotrun.agent.logs import LogShipper
from spotrun.agent.notices import Notice, NoticeSource, NoticeWatcher
from spotrun.agent.process import CommandProcess
from spotrun.agent.reporting import Reporter
from spotrun.agent.save_budget import SlowSaveCheck, budget_for
from spotrun.agent.standby import StandbyHold
from spotrun.agent.stop_times import StopTimes
from spotrun.sdk import PREEMPTED_EXIT_CODE  # 75: the trainer saved its work after a notice, resume it
from spotrun.sdk.backup_marks import BackupWriter
from spotrun.user_paths import UnknownUser

log = logging.getLogger(__name__)

ADDRESS_ENV_VAR = "SPOTRUN_INSTANCE_ADDRESS"
RESTORE_TRIES = 3
OUTPUT_DRAIN_SECONDS = 2.0
WAIT_STEP_SECONDS = 0.1
GROUP_POLL_SECONDS = 0.1
EXIT_REPORT_SECONDS = 2.0  # kept back from a notice's deadline for the exit report, when the store does not answer
MIN_BACKUP_SECONDS = 1.0  # the final backup's time at least, however close the deadline
KILLED_EXIT_SECONDS = 2.0  # how long a SIGKILLed command may take to go; one stuck in the kernel is left behind
STOPPED_WAIT_FLOOR_SECONDS = 0.2  # a SIGKILLed command normally goes within this; waited for however close the deadline


@dataclass(frozen=True)
class ExitReport:
    outcome: str  # succeeded | failed | preempted
    exit_code: int | None
    checkpoint_synced: bool


def outcome_of(exit_code: int) -> str:
    if exit_code == 0:
        return "succeeded"
    if exit_code == PREEMPTED_EXIT_CODE:
        return "preempted"
    return "failed"


def trainer_environment(
    config: AgentConfig, checkpoint_dir: Path | str, resumed: bool, environ: Mapping[str, str]
) -> dict[str, str]:
    env = {key: value for key, value in environ.items() if key != CONFIG_ENV_VAR}  # it holds the token
    env.update(config.env)
    env.update(
        SPOTRUN_JOB_ID=str(config.job_id),
        SPOTRUN_ATTEMPT=str(config.attempt_number),
        SPOTRUN_CHECKPOINT_DIR=str(checkpoint_dir),
        SPOTRUN_RESUME="1" if resumed else "0",
    )
    return env


def instance_address(environ: Mapping[str, str]) -> str:
    """Where this instance can be reached: $SPOTRUN_INSTANCE_ADDRESS (set by the provider), else the hostname."""
    return environ.get(ADDRESS_ENV_VAR) or socket.gethostname()


def echo_output(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # the agent's own stdout is gone; the controller still gets the log


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        notice_sources: Sequence[NoticeSource],
        environ: Mapping[str, str] = os.environ,
        startup_problem: str | None = None,
    ) -> None:
        self.config = config
        self.environ = environ
        self.startup_problem = startup_problem  # the attempt fails at once, saying this in the job's log
        try:
            self.checkpoint_dir = config.local_checkpoint_dir(environ)
        except UnknownUser as unknown:  # ~user in checkpoint.dir: the agent died here, and its attempt was "lost"
            self.checkpoint_dir = config.instance_disk(environ) / "checkpoints"  # not used: nothing runs
            self.startup_problem = startup_problem or f"checkpoint.dir: {unknown}"
        self.sync = CheckpointSync(self.checkpoint_dir, config.checkpoint_store, config.storage_options,
                                   writer=BackupWriter(config.job_id, config.attempt_id))
        self.client = ControllerClient(config.controller_url, config.token.get_secret_value(), config.attempt_id,
                                       alternates=config.controller_urls)
        self.reporter = Reporter(self.client)
        self.logs = LogShipper(self.client)
        self.controller_stop = ControllerStopNotice(config.notice_grace)
        self.notices = NoticeWatcher([*notice_sources, self.controller_stop], config.notice_poll_interval)
        self._cloud_sources = [source for source in notice_sources if isinstance(source, MetadataSource)]
        for source in self._cloud_sources:
            source.relay_early_warnings(self.report_early_warning)
        self.hold = StandbyHold(config.hold)
        self.heartbeat = Heartbeat(
            self.client, config.heartbeat_interval, self.sync.newest_local_progress, self._on_heartbeat_reply
        )
        self.backup = PeriodicBackup(self.sync, config.sync_interval)
        self.slow_saves = SlowSaveCheck(budget_for(notice_sources, config.notice_grace), self._report_slow_save)
        self.sync.on_uploaded = self.slow_saves.checked
        self._process: CommandProcess | None = None
        self._started: list[CommandProcess] = []  # every command's group: the setup's, the run's, each generation's
        self._told: list[Notice] = []  # the notices told to the controller
        self.backup_left_running = False  # the final backup was given up on, its copy stuck in a store call
        self._restoring: threading.Thread | None = None  # the restore's copy (`_restore`)

    def run(self) -> ExitReport:
        """Do the whole attempt and return what was reported to the controller as its exit."""
        self.reporter.start()
        self.notices.start()
        try:
            try:
                report = self._refused_at_start() or self._attempt()
            except Exception:
                log.exception("agent error; reporting the attempt as failed")
                self._kill_command()
                report = ExitReport("failed", None, checkpoint_synced=False)
            self._report_exit(report)
            self._let_the_instance_go()
            return report
        finally:
            self._shut_down()

    def _refused_at_start(self) -> ExitReport | None:
        """An instance set up so that the agent cannot do its work (a malformed cloud setting): the attempt is
        reported, and fails with the reason in its log, instead of an agent the controller never hears from."""
        if self.startup_problem is None:
            return None
        self._report_started()
        self._output(f"spotrun agent: {self.startup_problem}\n")
        return ExitReport("failed", None, checkpoint_synced=False)

    def report_early_warning(self, warning: EarlyWarning) -> None:
        """Tell the controller of an announcement that is not a preemption (an EC2 rebalance recommendation: the
        instance is at higher risk of one); the trainer runs on."""
        self.reporter.send("warning", {"source": warning.source, "kind": warning.kind, "detail": warning.detail,
                                       "at": warning.at})

    def _report_slow_save(self, body: dict) -> None:
        """A checkpoint that took longer to save and back up than a notice leaves: an event for the user, and a line
        in the job's log."""
        self.reporter.send("slow_save", body)
        self._output(
            f"spotrun agent: checkpoint {body['checkpoint_step']} took {body['save_seconds'] or 0:.1f} s to save and "
            f"{body['upload_seconds']:.1f} s to back up, more than the {body['budget_seconds']:.0f} s a "
            f"{body['notice']} notice leaves: a preemption would resume from an older checkpoint\n"
        )

    def _on_heartbeat_reply(self, reply: dict) -> None:
        self.controller_stop.on_heartbeat_reply(reply)
        self.hold.on_heartbeat_reply(reply)

    def _attempt(self) -> ExitReport:
        # Report in before restoring: a large restore must not look like a silent agent to the controller.
        self._report_started()
        notice = self._hold_until_released()
        if notice is not None:  # taken back while standing by: nothing ran, nothing to back up
            self._tell_notice(notice)
            return ExitReport("preempted", None, checkpoint_synced=False)
        try:
            restored_step = self._restore()
        except Exception as exc:
            if (taken := self._taken_back_meanwhile()) is not None:
                return taken
            log.exception("cannot restore checkpoints from the store")
            self._output(f"spotrun agent: cannot restore checkpoints from {self.config.checkpoint_store}: {exc}\n")
            return ExitReport("failed", None, checkpoint_synced=False)
        if (taken := self._taken_back_meanwhile()) is not None:
            return taken
        if restored_step is None:
            log.info("no checkpoint in the store: starting fresh")
        else:
            log.info("resuming from checkpoint step %d", restored_step)
        self.backup.start()
        return self._run_commands(
            trainer_environment(self.config, self.checkpoint_dir, restored_step is not None, self.environ)
        )

    def _taken_back_meanwhile(self) -> ExitReport | None:
        """A notice that came while the checkpoints were restored: reported, and the command not started (nothing
        ran: nothing to back up), instead of a failed restore or a trainer killed as it starts."""
        notice = self.notices.notice
        if notice is None:
            return None
        log.warning("preemption notice from %s during the restore: the command is not started", notice.source)
        self._tell_notice(notice)
        return ExitReport("preempted", None, checkpoint_synced=False)

    def _run_commands(self, env: dict[str, str]) -> ExitReport:
        """setup (when given) then run; a failed setup ends the attempt as failed."""
        steps = ([("setup", self.config.setup)] if self.config.setup else []) + [("run", self.config.run)]
        for label, command in steps:
            log.info("starting %s command", label)
            process = self._new_process(command, env)
            try:
                process.start()
            except OSError as exc:  # e.g. the workdir does not exist: the user's to fix, so it goes in their log
                self._output(f"spotrun agent: cannot start the {label} command: {exc}\n")
                return ExitReport("failed", None, self._final_backup(times=None))
            notice = self._wait_for_exit_or_notice(process)
            if notice is not None:
                return self._answer_notice(process, notice, ends_the_job=label == "run")
            exit_code = process.returncode
            log.info("%s command exited with %d", label, exit_code)
            if label == "run" or exit_code != 0:
                # helpers of its group still writing (a checkpoint) finish first, or are killed: nothing writes
                # after the final backup
                times = self._wait_for_the_group(process, None, until=time.time() + self.config.notice_grace)
                outcome = outcome_of(exit_code) if label == "run" else "failed"
                return ExitReport(outcome, exit_code, self._final_backup(times))
        raise AssertionError("the run command always ends the attempt")

    def _report_started(self) -> None:
        """Heartbeats and logs flow once the controller knows the attempt started; output is held till then."""

        def controller_answered(delivery: Delivery) -> None:
            self.heartbeat.start()
            self.logs.start()

        self.reporter.send("started", {"address": instance_address(self.environ)}, on_answer=controller_answered)

    def _hold_until_released(self) -> Notice | None:
        """A standby waits here until released (None), or until a notice ends it first (the notice)."""
        if not self.hold.released:
            log.info("standing by: restoring once the attempt this one takes over from has stopped")
            self._output("spotrun agent: standing by until the attempt this one takes over from has stopped\n")
        while not self.hold.released:
            notice = self.notices.wait(WAIT_STEP_SECONDS)
            if notice is not None:
                return notice
        return None

    @property
    def restore_left_running(self) -> bool:
        """The restore was given up on at a notice, its copy still in a store call."""
        return self._restoring is not None and self._restoring.is_alive()

    def _restore(self) -> int | None:
        """The newest restored step, or None: copied in a thread of its own, so that a notice that comes meanwhile
        is seen at once, however long the copy (a large checkpoint, a store that hangs). The copy is then stopped
        (between files) and None returned: there is nothing to train for, and the notice is told now
        (`_taken_back_meanwhile`), while the controller still has time to act on it."""
        outcome: list[int | None] = []
        failure: list[Exception] = []
        stop = threading.Event()

        def restore() -> None:
            try:
                outcome.append(self._restore_with_retries(stop))
            except Exception as exc:
                failure.append(exc)

        self._restoring = threading.Thread(target=restore, name="spotrun-restore", daemon=True)
        self._restoring.start()
        while self._restoring.is_alive():
            if self.notices.wait(WAIT_STEP_SECONDS) is not None:
                stop.set()
                return None
        if failure:
            raise failure[0]
        return outcome[0]

    def _restore_with_retries(self, stop: threading.Event) -> int | None:
        """A failing store is tried RESTORE_TRIES times; a store URI or option that cannot work (unknown protocol,
        missing package) fails at once, and so does a restore stopped."""
        for attempt in range(1, RESTORE_TRIES):
            try:
                return self.sync.restore(older_on_error=False, stop=stop)  # the last try may settle for an older one
            except (ValueError, ImportError, BackupCutShort):
                raise
            except Exception:
                log.warning("restore failed (try %d of %d); retrying", attempt, RESTORE_TRIES, exc_info=True)
                stop.wait(2**attempt)
        return self.sync.restore(stop=stop)

    def _output(self, text: str) -> None:
        echo_output(text)
        self.logs.write(text)

    def _wait_for_exit_or_notice(self, process: CommandProcess) -> Notice | None:
        """None once the command exited (its output forwarded), or the notice that came first."""
        while process.wait(0) is None:
            notice = self.notices.wait(WAIT_STEP_SECONDS)
            if notice is not None:
                return notice
        process.drain_output(OUTPUT_DRAIN_SECONDS)
        return None

    def _answer_notice(self, process: CommandProcess, notice: Notice, ends_the_job: bool = True) -> ExitReport:
        """Stop the command noticed; ``ends_the_job``: it is the run (not a setup, after which the run is still to
        come), so its 0 is the job done."""
        self._tell_notice(notice)
        times = self._stop_times(notice)
        self._say_stopping(f"notice from {notice.source} ({notice.detail})", times.stop_by())
        process.signal_group(signal.SIGTERM)
        exit_code = None
        while exit_code is None and time.time() < times.stop_by():
            exit_code = process.wait(min(WAIT_STEP_SECONDS, max(0.0, times.stop_by() - time.time())))
            self._tell_the_clouds_notice()
        if exit_code is None:
            log.warning("command still running at the stop time; killing its process group")
            exit_code = self._kill(process, times)
        self._wait_for_the_group(process, times)
        log.info("command stopped after the notice with exit code %s", exit_code)
        process.drain_output(self._wait_before_backup(times, OUTPUT_DRAIN_SECONDS))
        self._tell_the_clouds_notice()
        # 0: its loop was done (the final save and evaluation end at 0), and a run that finished is not run again
        outcome = "succeeded" if exit_code == 0 and ends_the_job else "preempted"
        return ExitReport(outcome, exit_code, self._final_backup(times))

    def _say_stopping(self, why: str, stop_by: float) -> None:
        """One line in the job's log as the command is asked to stop, so that what follows (the trainer's save,
        torchrun's warnings, an exit code other than 0) reads as the stop it is, not as a crash."""
        self._output(f"spotrun agent: {why}: asking the command to checkpoint and stop (SIGTERM; killed if still "
                     f"running in {max(0.0, stop_by - time.time()):.0f} s)\n")

    def _stop_times(self, answered: Notice) -> StopTimes:
        return StopTimes(self.notices, answered, time.time(), self.config.notice_grace, self._kill_margin())

    def _kill_margin(self) -> float:
        """How long before a notice's deadline the command is killed: the sync margin, for the final backup and then
        the exit report (the backup is cut EXIT_REPORT_SECONDS before the deadline: the report's part of the margin)."""
        return self.config.sync_margin

    def _tell_notice(self, notice: Notice) -> None:
        """Tell the controller of a notice, once, wherever the agent saw it first."""
        if notice in self._told:
            return
        self._told.append(notice)
        self.reporter.send("notice", {"source": notice.source, "deadline": notice.deadline, "detail": notice.detail})

    def _tell_the_clouds_notice(self) -> None:
        """Tell the controller of the cloud's notice that came after the agent's own (a SIGTERM, the controller's
        stop), once: only then does it leave the instance to the cloud, which takes it back free on EC2 in its first
        hour (`control.reclaims`)."""
        cloud = self.notices.cloud_notice
        if cloud is not None and cloud not in self._told:
            self._tell_notice(cloud)

    def _notice_since(self, times: StopTimes | None) -> StopTimes | None:
        """The stop times of a notice that came once the agent no longer waited for one (as the command ended, or
        during the final backup), told to the controller, which leaves a noticed instance to the cloud only when it
        knows; ``times`` when there were some already, its cloud's notice told if one came since."""
        if times is not None:
            self._tell_the_clouds_notice()
            return times
        notice = self.notices.notice
        if notice is None:
            return None
        self._tell_notice(notice)
        return self._stop_times(notice)

    def _kill(self, process: CommandProcess, times: StopTimes | None) -> int | None:
        """SIGKILL the command's group; its exit code, or None when it is still there a moment later (in
        uninterruptible sleep: a hung NFS or device call), so that the agent still backs up and reports in time."""
        process.signal_group(signal.SIGKILL)
        waited = self._wait_before_backup(times, KILLED_EXIT_SECONDS)
        exit_code = process.wait(waited)
        if exit_code is None:
            log.error("command still there %.1f s after SIGKILL (stuck in the kernel); going on without its exit code",
                      waited)
        return exit_code

    @staticmethod
    def _wait_before_backup(times: StopTimes | None, most: float) -> float:
        """How long a stopped command may still be waited for (its exit, its output): ``most``, and no longer than
        lets the final backup start with its full time before a noticed deadline (`_backup_time_up`): a command stuck
        in the kernel would otherwise push the backup, and the exit report after it, past the cloud's deadline."""
        deadline = None if times is None else times.deadline()
        if deadline is None:
            return most
        left = deadline - EXIT_REPORT_SECONDS - MIN_BACKUP_SECONDS - time.time()
        return min(most, max(STOPPED_WAIT_FLOOR_SECONDS, left))

    def _wait_for_the_group(
        self, process: CommandProcess, times: StopTimes | None, until: float | None = None
    ) -> StopTimes | None:
        """The rest of the command's process group (a helper still writing a checkpoint, say) until the stop time,
        then killed: the final backup must see what they wrote, and nothing may write after it. A notice that comes
        meanwhile is told at once, and its stop time kept to if sooner; the stop times of the notice, if any."""
        while process.group_alive() and time.time() < self._stop_time(times, until):
            time.sleep(GROUP_POLL_SECONDS)
            times = self._notice_since(times)
        if process.group_alive():
            log.warning("processes of the command's group still running at the stop time; killing them")
            process.signal_group(signal.SIGKILL)
        return times

    @staticmethod
    def _stop_time(times: StopTimes | None, until: float | None) -> float:
        """``until``, or the noticed stop time (``times``) when sooner; one of them is given."""
        noticed = None if times is None else times.stop_by()
        return min(stop for stop in (until, noticed) if stop is not None)

    def _final_backup(self, times: StopTimes | None) -> bool:
        """Back the checkpoints up; give up at the deadline, or final_backup_timeout after starting, even on a store
        that stopped answering (its call left to finish in the background): the exit must still be reported. The
        deadline is the soonest so far: a notice that comes during the backup (a SIGTERM after the cloud's, the cloud's after a
        normal exit) brings it forward."""
        self.backup.stop()
        times = self._notice_since(times)
        outcome: list[bool] = []
        cut = threading.Event()
        deadline = None if times is None else times.deadline()

        def back_up() -> None:
            try:
                outcome.append(self.sync.backup(deadline=deadline, stop=cut))
            except Exception:
                log.exception("final checkpoint backup failed")
                outcome.append(False)

        worker = threading.Thread(target=back_up, name="spotrun-final-backup", daemon=True)
        started = time.time()
        worker.start()
        while worker.is_alive() and not self._backup_time_up(times, started):
            worker.join(WAIT_STEP_SECONDS)
            times = self._notice_since(times)
        cut.set()  # a copy still going stops between files: the exit is reported now
        if not outcome:
            self.backup_left_running = True
            log.error("final checkpoint backup not done in time (the deadline, or final_backup_timeout): the store "
                      "did not answer")
            return False
        log.info("final checkpoint backup %s", "complete" if outcome[0] else "incomplete")
        return outcome[0]

    def _backup_time_up(self, times: StopTimes | None, started: float) -> bool:
        """At the deadline (less the exit report's time), or final_backup_timeout after the backup started, whichever
        comes first: without a deadline (a normal exit) too."""
        now = time.time()
        if now >= started + self.config.final_backup_timeout:
            return True
        deadline = None if times is None else times.deadline()
        if deadline is None:
            return False
        return now >= max(started + MIN_BACKUP_SECONDS, deadline - EXIT_REPORT_SECONDS)

    def _log_flush_seconds(self) -> float:
        """How long the log may hold a report back: log_flush_timeout, and no longer than a notice's deadline leaves
        (less the exit report's time)."""
        notice, flush = self.notices.notice, self.config.log_flush_timeout
        if notice is None or notice.deadline is None:
            return flush
        return min(flush, max(MIN_BACKUP_SECONDS, notice.deadline - EXIT_REPORT_SECONDS - time.time()))

    def _report_exit(self, report: ExitReport) -> None:
        # Logs first, so the controller holds the whole log when it sees the exit; bounded, as the exit matters more.
        self.logs.close(timeout=self._log_flush_seconds())
        self.heartbeat.stop()  # nothing about the attempt's life follows its exit
        self.reporter.send("exit", {**asdict(report), "nothing_to_back_up": self._nothing_to_back_up()})
        log.info("reporting exit: %s (exit code %s)", report.outcome, report.exit_code)
        self.reporter.wait_delivered()
        self.logs.close(timeout=self.config.log_flush_timeout)

    def _nothing_to_back_up(self) -> bool:
        """Whether the checkpoint folder held nothing to back up (no checkpoint, no user file), so that the exit of a
        job that saves none does not say its checkpoints were backed up; False where the folder cannot be read."""
        try:
            return not (self.sync.local.committed() or self.sync.local.user_files())
        except Exception:
            log.warning("cannot list the checkpoint folder %s", self.checkpoint_dir, exc_info=True)
            return False

    def _let_the_instance_go(self) -> None:
        """Once the exit is reported, the cloud need not wait for its notice's deadline (Azure, told so, evicts at
        once); not while the final backup's copy is still going, which may yet land before that deadline."""
        if self.backup_left_running:
            return
        for source in self._cloud_sources:
            source.instance_may_go()

    def _new_process(self, command: str, env: dict[str, str]) -> CommandProcess:
        process = self._process = CommandProcess(command, self.config.command_cwd(self.environ), env, self._output)
        self._started.append(process)
        return process

    def _kill_command(self) -> None:
        """Every command's whole group, the commands gone or not: nothing they started (a setup's daemon, a helper
        of an earlier generation) outlives the agent."""
        for process in self._started:
            if process.is_running() or process.group_alive():
                process.signal_group(signal.SIGKILL)

    def _shut_down(self) -> None:
        self._kill_command()  # never leave the trainer behind
        self.backup.stop()
        self.heartbeat.stop()
        self.notices.stop()
        self.reporter.close()
        self.client.close()
