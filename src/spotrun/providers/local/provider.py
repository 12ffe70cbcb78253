"""The local cloud: processes on this machine play spot and on-demand instances (see vm.py and market.py)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

import spotrun
from spotrun.config import home
from spotrun.costs import catalog
from spotrun.providers.base import InstanceInfo, LaunchRequest, NoCapacity, PriceTooLow, QuotaExceeded
from spotrun.providers.local import processes
from spotrun.providers.local.market import ZONES, Market, TraceMarket, load_market, parse_market, set_market
from spotrun.providers.local.records import (
    PREEMPT_REQUEST,
    TERMINATE_REQUEST,
    InstanceDir,
    InstanceRecord,
    RecordError,
    all_instance_dirs,
    discard_unfinished,
    file_lock,
    instance_dir,
    unfinished_dir,
    write_json_atomic,
)

CLOUD = "local"
# 127.0.0.2 - 127.0.255.254: 127.0.0.1 stays the host's own
LOOPBACK_HOSTS = [f"127.0.{high}.{low}" for high in range(256) for low in range(1, 255) if (high, low) != (0, 1)]
DEFAULT_QUOTA = 16
VANISHED = "vm process vanished"
BOOT_OUTPUT_LINES = 5  # of what a failed boot command wrote, told with its exit code
_CONSOLE_TAIL_BYTES = 8192
_VM_LOG_LINE = re.compile(r"^\[[^\]]*\] vm: ")  # the VM's own lines in the console (`vm.log`)


class UnknownInstance(LookupError):
    """No instance with this id was ever launched in this local cloud."""


class LocalProvider:
    """A cloud whose instances are VM processes (``python -m spotrun.providers.local.vm``) on this machine.

    Its records live under `root` (default $SPOTRUN_HOME/local-cloud). Passing `market` (a market or its
    JSON form, e.g. {"kind": "random", "mean_lifetime_seconds": 60}) makes it the market of every provider
    and VM on the same root; otherwise the stored one (or manual) is used.
    """

    name = CLOUD

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        market: Market | Mapping[str, Any] | None = None,
        quota: int = DEFAULT_QUOTA,
        shutdown_grace_seconds: float = 1.0,
        terminate_timeout_seconds: float = 20.0,
    ) -> None:
        self.root = Path(root).resolve() if root is not None else home() / "local-cloud"
        self.root.mkdir(parents=True, exist_ok=True)
        if quota < 0:
            raise ValueError(f"quota must be >= 0, got {quota}")
        self.quota = quota
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.terminate_timeout_seconds = terminate_timeout_seconds
        self._vms: dict[str, subprocess.Popen[bytes]] = {}  # VMs this object started, reaped when they exit
        if market is not None:
            set_market(self.root, parse_market(market) if isinstance(market, Mapping) else market)

    # -- market ---------------------------------------------------------------------------------------

    @property
    def market(self) -> Market:
        return load_market(self.root)

    def set_market(self, market: Market) -> None:
        set_market(self.root, market)

    def zones(self, instance_type: str, accelerators: Mapping[str, int] | None = None) -> list[str]:
        _check_instance_type(instance_type)
        return list(ZONES)

    # -- launch -----------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> InstanceInfo:
        _validate(request)
        with file_lock(self.root / "registry.lock"):
            discard_unfinished(self.root)  # a launcher killed while creating its instance: none was made
            existing = self._record_by_token(request.client_token)
            if existing is not None:
                return self._relaunch(existing, request)
            self._check_price(request)
            self._check_capacity(request, self._market_with_its_clock_started())
            self._check_quota()
            instance = self._create(request)
            self._start_vm(instance)
        return self.describe(instance.instance_id)

    def _relaunch(self, record: InstanceRecord, request: LaunchRequest) -> InstanceInfo:
        asked = (request.zone, request.market, request.instance_type)
        if (record.zone, record.market, record.instance_type) != asked:
            raise ValueError(
                f"client token {request.client_token!r} was used for {record.id} "
                f"({record.zone}, {record.market}, {record.instance_type}), not for {asked}"
            )
        if record.pid is None and record.state == "pending":  # an earlier launch died before starting the VM
            self._start_vm(instance_dir(self.root, record.id))
        return self.describe(record.id)

    def _check_price(self, request: LaunchRequest) -> None:
        if request.market != "spot" or request.max_price is None:
            return
        spot = catalog.price(CLOUD, request.instance_type, "spot", request.zone)
        if request.max_price < spot:
            raise PriceTooLow(
                f"max price ${request.max_price}/h is below the spot price ${spot}/h "
                f"of {request.instance_type} in {request.zone}"
            )

    def _market_with_its_clock_started(self) -> Market:
        """The market; a trace market waiting for the first launch starts its clock now (under the registry lock)."""
        market = self.market
        if isinstance(market, TraceMarket) and not market.started:
            market = market.started_at(time.time())
            set_market(self.root, market)
        return market

    def _check_capacity(self, request: LaunchRequest, market: Market) -> None:
        if request.market == "spot" and not market.spot_available(request.zone, time.time()):
            raise NoCapacity(f"no spot capacity for {request.instance_type} in {request.zone} right now")

    def _check_quota(self) -> None:
        active = [info for info in self.list_instances() if info.state in ("pending", "running", "unknown")]
        if len(active) >= self.quota:
            raise QuotaExceeded(f"{len(active)} instances running; the quota is {self.quota}")

    def _create(self, request: LaunchRequest) -> InstanceDir:
        """The instance's folder, made aside (`unfinished_dir`, which no listing shows) and renamed into place with
        its record, client token included, already in it: a launcher killed half-way leaves no instance that the
        cloud lists but whose token a relaunch cannot find (it made another one: two instances, one on record)."""
        instance_id = f"li-{secrets.token_hex(6)}"
        instance, aside = instance_dir(self.root, instance_id), unfinished_dir(self.root, instance_id)
        for folder in (aside.path, aside.disk, aside.metadata, aside.requests):
            folder.mkdir(parents=True)
        write_json_atomic(aside.user_data_file, request.user_data, mode=0o600)
        record = InstanceRecord(
            id=instance_id,
            zone=request.zone,
            market=request.market,
            instance_type=request.instance_type,
            client_token=request.client_token,
            launched_at=time.time(),
            shutdown_grace_seconds=self.shutdown_grace_seconds,
            address=self._next_address(),
        )
        aside.write(record)  # the token is on record before anything runs: a retry finds it
        os.rename(aside.path, instance.path)
        return instance

    def _next_address(self) -> str:
        """Each instance its own loopback address (127.0.0.2, 127.0.0.3, ...; Linux routes all of 127/8 to lo),
        so that a replaced instance really has a new address. Handed out round-robin, skipping live ones; called
        under the registry lock."""
        in_use = {record.address for record in self._records() if record.state != "terminated"}
        counter = self.root / "next-address"
        number = int(counter.read_text()) if counter.exists() else 0
        for _ in range(len(LOOPBACK_HOSTS)):
            address = LOOPBACK_HOSTS[number % len(LOOPBACK_HOSTS)]
            number += 1
            if address not in in_use:
                counter.write_text(str(number))
                return address
        raise QuotaExceeded(f"all {len(LOOPBACK_HOSTS)} loopback addresses are in use")

    def _start_vm(self, instance: InstanceDir) -> None:
        """Start the instance's VM process, unless one already runs for it: the VM inherits the lock on vm.lock taken
        here and holds it while it lives, so a relaunch after a launcher killed before the VM's pid was on record (and
        before the VM recorded itself) finds that VM starting, where it would have started a second one."""
        with open(instance.vm_lock_file, "a+b") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # that VM records its own pid as it comes up
            with open(instance.console_log, "ab") as console:
                vm = subprocess.Popen(
                    [sys.executable, "-m", "spotrun.providers.local.vm", str(instance.path)],
                    stdin=subprocess.DEVNULL,
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # outlives whoever launched it, like a real VM
                    env=_vm_environment(),
                    pass_fds=(lock.fileno(),),  # closing our copy leaves the lock to the VM's
                )
        self._vms[instance.instance_id] = vm
        try:
            started_at = psutil.Process(vm.pid).create_time()
        except psutil.NoSuchProcess:
            started_at = None
        with instance.locked():
            record = instance.read()
            if record.pid is None:  # the VM may already have recorded itself
                instance.write(record.model_copy(update={"pid": vm.pid, "pid_started_at": started_at}))

    # -- look ---------------------------------------------------------------------------------------

    def describe(self, instance_id: str) -> InstanceInfo:
        """From the record and a liveness check of the VM; an unreadable record answers state="unknown"."""
        self._reap_vms()
        instance = instance_dir(self.root, instance_id)
        try:
            record = instance.read()
        except RecordError as error:
            return _unknown(instance_id, str(error))
        if record.state != "terminated" and record.pid is not None:
            if processes.find_process(record.pid, record.pid_started_at) is None:
                record = self._clean_up_vanished(instance)
        return _info(instance, record)

    def find_by_token(self, client_token: str) -> InstanceInfo | None:
        record = self._record_by_token(client_token)
        return self.describe(record.id) if record is not None else None

    def list_instances(self) -> list[InstanceInfo]:
        return [self.describe(instance.instance_id) for instance in all_instance_dirs(self.root)]

    def _record_by_token(self, client_token: str) -> InstanceRecord | None:
        return next((record for record in self._records() if record.client_token == client_token), None)

    def _records(self) -> Iterator[InstanceRecord]:
        """Every readable instance record (an unreadable one is skipped: describe reports it as unknown)."""
        for instance in all_instance_dirs(self.root):
            try:
                yield instance.read()
            except RecordError:
                continue

    # -- end ----------------------------------------------------------------------------------------

    def terminate(self, instance_id: str) -> None:
        """Stop every process of the instance and delete its disk; returns once it is terminated. Idempotent: an
        instance this cloud no longer knows (its record gone) is terminated already, as on the other clouds."""
        try:
            instance = self._existing(instance_id)
        except UnknownInstance:
            return
        record = instance.read()
        if record.state == "terminated":
            self._kill_leftovers(instance, record)
            return
        if record.pid is None:  # a launch that died before starting the VM; launches hold the registry lock
            with file_lock(self.root / "registry.lock"):
                if instance.read().pid is None:
                    self._clean_up_vanished(instance, reason="terminated before its vm started")
                    return
            record = instance.read()
        self._request(instance, record, TERMINATE_REQUEST, {})
        deadline = time.monotonic() + record.shutdown_grace_seconds + self.terminate_timeout_seconds
        if not self._wait_for(instance, lambda r: r.state == "terminated", deadline):
            self._kill_vm(instance.read())
            self._clean_up_vanished(instance, reason="vm did not stop in time; killed")
        self._reap_vms()

    def preempt(self, instance_id: str, notice_seconds: float | None = None) -> None:
        """Reclaim a spot instance as the cloud would: the notice now, the kill `notice_seconds` later.

        Returns once the notice is out (metadata/spot/instance-action written); None = the market's notice.
        """
        instance = self._existing(instance_id)
        record = instance.read()
        if record.market != "spot":
            raise ValueError(f"{instance_id} is an on-demand instance; only spot instances are reclaimed")
        if notice_seconds is not None and notice_seconds < 0:
            raise ValueError(f"notice_seconds must be >= 0, got {notice_seconds}")
        if record.state == "terminated" or record.notice_at is not None:
            return
        self._request(instance, record, PREEMPT_REQUEST, {"notice_seconds": notice_seconds})
        deadline = time.monotonic() + self.terminate_timeout_seconds
        self._wait_for(instance, lambda r: r.notice_at is not None or r.state == "terminated", deadline)

    def _existing(self, instance_id: str) -> InstanceDir:
        instance = instance_dir(self.root, instance_id)
        if not instance.record_file.exists():
            raise UnknownInstance(f"no local instance {instance_id!r} under {self.root}")
        return instance

    def _request(self, instance: InstanceDir, record: InstanceRecord, name: str, body: dict[str, Any]) -> None:
        """Leave a request for the VM and wake it (a VM still starting finds the file on its first look)."""
        write_json_atomic(instance.requests / name, body)
        vm = processes.find_process(record.pid, record.pid_started_at)
        if vm is not None and instance.read().state == "running":  # its SIGUSR1 handler is installed
            try:
                vm.send_signal(signal.SIGUSR1)
            except psutil.NoSuchProcess:
                pass

    def _wait_for(self, instance: InstanceDir, done: Callable[[InstanceRecord], bool], deadline: float) -> bool:
        """Poll until `done(record)`; a VM that dies meanwhile is cleaned up. False on the deadline."""
        while time.monotonic() < deadline:
            self._reap_vms()
            record = instance.read()
            if done(record):
                return True
            if record.pid is not None and processes.find_process(record.pid, record.pid_started_at) is None:
                self._clean_up_vanished(instance)
                return True
            time.sleep(0.05)
        return False

    def _clean_up_vanished(self, instance: InstanceDir, reason: str = VANISHED) -> InstanceRecord:
        """The VM is gone without recording its end: kill what it left, delete the disk, record the end."""
        with instance.locked():
            record = instance.read()
            if record.state == "terminated":  # the VM finished its own shutdown just now
                return record
            self._kill_leftovers(instance, record)
            instance.remove_disk()
            record = record.model_copy(
                update={"state": "terminated", "terminated_at": time.time(), "reclaimed": False, "reason": reason}
            )
            instance.write(record)
            return record

    def _kill_leftovers(self, instance: InstanceDir, record: InstanceRecord) -> None:
        def leftovers() -> list[psutil.Process]:
            return processes.with_descendants(
                [*processes.live_processes(_tracked(instance)), *processes.marked_processes(record.id)]
            )

        processes.stop_processes(leftovers, grace_seconds=0.0)

    def _kill_vm(self, record: InstanceRecord) -> None:
        vm = processes.find_process(record.pid, record.pid_started_at)
        if vm is not None:
            processes.stop_processes(lambda: [vm] if vm.is_running() else [], grace_seconds=0.0)

    def _reap_vms(self) -> None:
        for instance_id, vm in list(self._vms.items()):
            if vm.poll() is not None:
                del self._vms[instance_id]


def _tracked(instance: InstanceDir) -> list[processes.ProcessIdentity]:
    try:
        return [(int(pid), float(started)) for pid, started in json.loads(instance.processes_file.read_text())]
    except (OSError, ValueError, TypeError):
        return []


def _vm_environment() -> dict[str, str]:
    """The launcher's environment without instance markers (so a VM launched from inside an instance is not
    mistaken for that instance's process), with this spotrun importable."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SPOTRUN_INSTANCE_") and key != "SPOTRUN_LOCAL_METADATA"
    }
    source_root = str(Path(spotrun.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")]))
    return env


def _check_instance_type(instance_type: str) -> None:
    try:
        catalog.entry(CLOUD, instance_type)
    except catalog.UnknownPrice as error:
        raise ValueError(str(error)) from None


def _validate(request: LaunchRequest) -> None:
    if not request.client_token:
        raise ValueError("launch request needs a client_token")
    if request.zone not in ZONES:
        raise ValueError(f"unknown zone {request.zone!r}; local zones are {', '.join(ZONES)}")
    if request.market not in ("spot", "on-demand"):
        raise ValueError(f"unknown market {request.market!r}; expected spot or on-demand")
    _check_instance_type(request.instance_type)
    user_data = request.user_data
    argv = user_data.get("argv", []) if isinstance(user_data, dict) else None
    if not isinstance(argv, list) or not all(isinstance(part, str) for part in argv):
        raise ValueError("user_data must be {'argv': [str, ...], 'env': {str: str}}; 'argv' is not a list of strings")
    env = user_data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(key, str) for key in env):
        raise ValueError("user_data 'env' must be a mapping of variable names to values")


def _info(instance: InstanceDir, record: InstanceRecord) -> InstanceInfo:
    detail: dict[str, Any] = {
        "pid": record.pid,
        "disk": str(instance.disk),
        "metadata": str(instance.metadata),
        "console_log": str(instance.console_log),
    }
    optional = {
        "reason": record.reason,
        "notice_at": record.notice_at,
        "reclaim_at": record.reclaim_at,
        "boot_exit_code": record.boot_exit_code,
    }
    detail.update({key: value for key, value in optional.items() if value is not None})
    return InstanceInfo(
        instance_id=record.id,
        zone=record.zone,
        market=record.market,
        instance_type=record.instance_type,
        state=record.state,
        reclaimed=record.reclaimed,
        address=record.address,
        launched_at=record.launched_at,
        terminated_at=record.terminated_at,
        client_token=record.client_token,
        detail=detail,
        start_failure=_boot_failure(instance, record),
    )


def _boot_failure(instance: InstanceDir, record: InstanceRecord) -> str | None:
    """How the boot command (the agent's start) failed: its exit code and its last lines in the console. Where the
    agent never reported in, the controller counts it against the job's restarts (`InstanceInfo.start_failure`),
    where silence alone would be relaunched without end. A command killed by a signal (a negative code) was ended
    from outside, not failing by itself; one that exited 0 did not fail."""
    code = record.boot_exit_code
    if code is None or code <= 0:
        return None
    lines = _boot_output(instance.console_log)
    return f"the boot command exited {code}" + (f": {' | '.join(lines)}" if lines else "")


def _boot_output(console_log: Path) -> list[str]:
    """The last lines the boot command wrote to the console, the VM's own left out."""
    try:
        with open(console_log, "rb") as console:
            start = max(console.seek(0, os.SEEK_END) - _CONSOLE_TAIL_BYTES, 0)
            console.seek(start)
            tail = console.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    lines = [line.strip() for line in (tail[1:] if start else tail)]  # a first line read from its middle is left out
    return [line for line in lines if line and not _VM_LOG_LINE.match(line)][-BOOT_OUTPUT_LINES:]


def _unknown(instance_id: str, why: str) -> InstanceInfo:
    """What describe answers when it cannot read the record: never "terminated" on a failed probe."""
    return InstanceInfo(
        instance_id=instance_id, zone="", market="spot", instance_type="", state="unknown", detail={"error": why}
    )


__all__ = ["LocalProvider", "UnknownInstance"]
