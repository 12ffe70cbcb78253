"""The emulator's hypervisor: it watches a cloud fake, boots every instance that starts running there (each with
its own metadata service, disk and log), switches off every VM whose instance the cloud no longer runs, and
reclaims an instance the way its cloud does: a notice on the metadata service, then, once the notice window has
passed, the VM is gone and the cloud's records say it was reclaimed."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from .clouds import CloudSide, NoticeChannel
from .machine import EmulatedVm

log = logging.getLogger(__name__)


class Hypervisor:
    def __init__(self, side: CloudSide, root: Path, *, poll_interval: float = 0.1) -> None:
        self.side = side
        self.root = root
        self.poll_interval = poll_interval
        self.errors: list[str] = []  # instances that could not be booted, and why
        self._vms: dict[str, EmulatedVm] = {}
        self._channels: dict[str, NoticeChannel] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"hypervisor-{side.cloud}", daemon=True)

    def __enter__(self) -> Hypervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop watching, switch every VM off and close every metadata service."""
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            vms, channels = list(self._vms.values()), list(self._channels.values())
        for vm in vms:
            vm.power_off()
        for channel in channels:
            channel.close()

    # ---- what tests use ----------------------------------------------------------------------------------

    @property
    def vms(self) -> dict[str, EmulatedVm]:
        with self._lock:
            return dict(self._vms)

    def vm(self, instance_id: str, timeout: float = 20.0) -> EmulatedVm:
        """The VM of `instance_id`, once booted."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.vms.get(instance_id)
            if found is not None:
                return found
            time.sleep(0.05)
        raise AssertionError(f"instance {instance_id} was never booted; boot errors: {self.errors}")

    def reclaim(self, instance_id: str, notice_seconds: float) -> None:
        """Announce the reclaim on the instance's metadata service; when the window has passed, switch the VM off
        and let the cloud record the reclaim. Returns once the instance is gone."""
        vm = self.vm(instance_id)
        with self._lock:
            channel = self._channels[instance_id]
        channel.announce(notice_seconds)
        time.sleep(notice_seconds)
        vm.power_off()
        self.side.reclaim(instance_id)

    def recommend_rebalance(self, instance_id: str) -> None:
        """EC2's rebalance recommendation on the instance's IMDS (AWS only): a warning, not a notice."""
        self.vm(instance_id)
        with self._lock:
            channel = self._channels[instance_id]
        channel.server.recommend_rebalance()  # type: ignore[attr-defined]

    def live_processes(self) -> int:
        return sum(len(vm.processes()) for vm in self.vms.values())

    # ---- the watch -----------------------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._look()
            except Exception:  # the fake may be mid-change; look again
                log.debug("hypervisor look failed", exc_info=True)
            self._stop.wait(self.poll_interval)

    def _look(self) -> None:
        running = self.side.running()
        known = self.vms
        for instance_id in running - set(known):
            self._boot(instance_id)
        for instance_id, vm in known.items():
            if instance_id not in running and vm.running:
                log.info("the cloud no longer runs %s: switching its VM off", instance_id)
                vm.power_off()

    def _boot(self, instance_id: str) -> None:
        try:
            boot = self.side.boot_of(instance_id)
        except Exception as error:
            self.errors.append(f"{instance_id}: cannot read its startup script: {error!r}")
            raise
        channel = self.side.notice_channel(instance_id)
        safe_name = instance_id.replace("/", "_")
        vm = EmulatedVm(instance_id, boot.zone, boot.startup_script, self.root / safe_name, channel.env)
        with self._lock:
            self._vms[instance_id] = vm
            self._channels[instance_id] = channel
        try:
            vm.boot()
        except Exception as error:
            self.errors.append(f"{instance_id}: boot failed: {error!r}")
            raise
