"""One local instance: ``python -m spotrun.providers.local.vm <instance-dir>``.

The VM runs the boot command from the user data, keeps running (idle) after it exits, replays the
market for its own reclaim, and on a terminate or reclaim kills every process of the instance,
deletes the scratch disk and records the end. The provider talks to it through request files in
requests/ plus a SIGUSR1 to wake it; SIGTERM is a terminate request too. The lock on vm.lock that its
launcher took is inherited and held, never touched, until the process exits (`LocalProvider._start_vm`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import psutil

from spotrun.providers.local import processes
from spotrun.providers.local.market import Market, MarketError, load_market
from spotrun.providers.local.records import (
    PREEMPT_REQUEST,
    TERMINATE_REQUEST,
    InstanceDir,
    InstanceRecord,
    RecordError,
    write_json_atomic,
)

POLL_SECONDS = 0.2
LOCAL_ADDRESS = "127.0.0.1"


def iso_utc(timestamp: float) -> str:
    """ISO-8601 UTC with milliseconds and a Z, like IMDS's instance-action time (which has whole seconds)."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log(message: str) -> None:
    print(f"[{iso_utc(time.time())}] vm: {message}", flush=True)


class Waker:
    """Lets a signal cut a sleep short: the handler's wakeup byte lands on a socket the loop selects on."""

    def __init__(self) -> None:
        self._reader, writer = socket.socketpair()
        self._writer = writer
        for end in (self._reader, writer):
            end.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def sleep(self, seconds: float) -> None:
        readable, _, _ = select.select([self._reader], [], [], max(seconds, 0.0))
        if readable:
            try:
                while self._reader.recv(4096):
                    pass
            except BlockingIOError:
                pass


class VirtualMachine:
    def __init__(self, instance: InstanceDir) -> None:
        self.instance = instance
        self.me = psutil.Process()
        self.boot: subprocess.Popen[bytes] | None = None
        self.terminate_signalled = False
        self.market: Market | None = None
        self.tracked: set[processes.ProcessIdentity] = set()

    def run(self) -> int:
        processes.become_subreaper()
        waker = Waker()
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        record = self._come_up()
        if record is None:
            log("the instance was terminated before its vm started")
            return 0
        self._write_metadata(record)
        self.boot = self._start_boot(record)
        while True:
            try:
                record = self.instance.read()
            except RecordError as error:  # someone broke the record; the instance keeps running meanwhile
                log(f"{error}; retrying")
                waker.sleep(1.0)
                continue
            try:
                if self._step(record):
                    return 0
            except Exception:  # a VM that crashed would lose the instance; log it and look again
                log(f"error in the vm loop, continuing:\n{traceback.format_exc()}")
            waker.sleep(self._next_look(record))

    def _come_up(self) -> InstanceRecord | None:
        """Record that the VM runs (its signal handlers are in place now); None if it was terminated already."""
        with self.instance.locked():
            record = self.instance.read()
            if record.state == "terminated":
                return None
            changes = {"state": "running", "address": record.address or LOCAL_ADDRESS, "pid": self.me.pid}
            record = record.model_copy(update={**changes, "pid_started_at": self.me.create_time()})
            self.instance.write(record)
            return record

    @staticmethod
    def _next_look(record: InstanceRecord) -> float:
        """Seconds until the next look: the poll interval, or less so that a reclaim lands on time."""
        if record.reclaim_at is None:
            return POLL_SECONDS
        return min(POLL_SECONDS, max(record.reclaim_at - time.time(), 0.0))

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.terminate_signalled = True

    def _step(self, record: InstanceRecord) -> bool:
        """One look at requests, the market and the processes; True once the instance is gone."""
        now = time.time()
        if self.terminate_signalled or (self.instance.requests / TERMINATE_REQUEST).exists():
            self._shut_down(reclaimed=False, reason="terminated on request")
            return True
        if record.reclaim_at is not None:
            if now >= record.reclaim_at:
                self._shut_down(reclaimed=True, reason="reclaimed: spot interruption")
                return True
        elif record.market == "spot":
            notice_seconds = self._notice_wanted(record, now)
            if notice_seconds is not None:
                self._give_notice(now, notice_seconds)
        self._watch_boot(record)
        self._track_processes()
        processes.reap_children(keep=self.boot.pid if self.boot else None)
        return False

    def _notice_wanted(self, record: InstanceRecord, now: float) -> float | None:
        """Seconds of notice if a preempt request or the market wants this spot instance back, else None."""
        request = self.instance.requests / PREEMPT_REQUEST
        if request.exists():
            notice = json.loads(request.read_text()).get("notice_seconds")
            if notice is not None:
                return float(notice)
            return self._current_market().notice_seconds
        market = self._current_market()
        if market.notice_due(record.id, record.zone, record.launched_at, now):
            return market.notice_seconds
        return None

    def _current_market(self) -> Market:
        try:
            self.market = load_market(self.instance.root)
        except (MarketError, OSError) as error:
            log(f"cannot read the market, keeping the last one: {error}")
        if self.market is None:
            raise RuntimeError("no usable market")
        return self.market

    def _give_notice(self, now: float, notice_seconds: float) -> None:
        reclaim_at = now + notice_seconds
        write_json_atomic(self.instance.instance_action_file, {"action": "terminate", "time": iso_utc(reclaim_at)})
        self.instance.update(notice_at=now, reclaim_at=reclaim_at)
        log(f"spot interruption notice: reclaim at {iso_utc(reclaim_at)}")

    def _write_metadata(self, record: InstanceRecord) -> None:
        metadata = self.instance.metadata
        (metadata / "placement").mkdir(parents=True, exist_ok=True)
        (metadata / "instance-id").write_text(record.id)
        (metadata / "instance-type").write_text(record.instance_type)
        (metadata / "instance-life-cycle").write_text("spot" if record.market == "spot" else "on-demand")
        (metadata / "placement" / "availability-zone").write_text(record.zone)
        (metadata / "local-ipv4").write_text(LOCAL_ADDRESS)

    def _start_boot(self, record: InstanceRecord) -> subprocess.Popen[bytes] | None:
        try:
            user_data = json.loads(self.instance.user_data_file.read_text())
        except (OSError, ValueError) as error:
            log(f"no usable user data ({error}); idle")
            return None
        argv = user_data.get("argv") or []
        if not argv:
            log("user data has no boot command; idle")
            return None
        extra = {key: str(value) for key, value in (user_data.get("env") or {}).items()}
        env = {**os.environ, **extra, **self._instance_env(record)}
        try:
            boot = subprocess.Popen(argv, cwd=self.instance.disk, env=env, stdin=subprocess.DEVNULL)
        except OSError as error:
            log(f"boot command {argv!r} failed to start: {error}; idle")
            self.instance.update(boot_exit_code=127)
            return None
        log(f"boot command started as pid {boot.pid}: {argv!r}")
        return boot

    def _instance_env(self, record: InstanceRecord) -> dict[str, str]:
        return {
            processes.INSTANCE_ID_ENV: record.id,
            "SPOTRUN_INSTANCE_DISK": str(self.instance.disk.resolve()),
            "SPOTRUN_LOCAL_METADATA": str(self.instance.metadata.resolve()),
            "SPOTRUN_INSTANCE_ZONE": record.zone,
            "SPOTRUN_INSTANCE_MARKET": record.market,
            "SPOTRUN_INSTANCE_ADDRESS": record.address or LOCAL_ADDRESS,
        }

    def _watch_boot(self, record: InstanceRecord) -> None:
        if self.boot is None or record.boot_exit_code is not None:
            return
        code = self.boot.poll()
        if code is not None:
            log(f"boot command exited with {code}; the instance stays up")
            self.instance.update(boot_exit_code=code)

    def _track_processes(self) -> None:
        """Keep processes.json current, so the provider can clean up after a VM that died."""
        current = set()
        for process in processes.live_descendants(self.me):
            try:
                current.add(processes.identity(process))
            except psutil.NoSuchProcess:  # exited while we looked
                continue
        if current != self.tracked:
            self.tracked = current
            write_json_atomic(self.instance.processes_file, sorted(current))

    def _shut_down(self, reclaimed: bool, reason: str) -> None:
        record = self.instance.read()
        log(f"shutting down: {reason}")
        grace = 0.0 if reclaimed else record.shutdown_grace_seconds
        processes.stop_processes(lambda: self._instance_processes(record.id), grace)
        if self.boot is not None:
            self.boot.poll()
        processes.reap_children()
        self.instance.remove_disk()
        write_json_atomic(self.instance.processes_file, [])
        self.instance.update(state="terminated", terminated_at=time.time(), reclaimed=reclaimed, reason=reason)
        log("terminated")

    def _instance_processes(self, instance_id: str) -> list[psutil.Process]:
        found = [*processes.live_descendants(self.me), *processes.marked_processes(instance_id)]
        return processes.with_descendants(found)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m spotrun.providers.local.vm <instance-dir>", file=sys.stderr)
        return 2
    instance = InstanceDir(Path(args[0]).resolve())
    return VirtualMachine(instance).run()


if __name__ == "__main__":
    sys.exit(main())
