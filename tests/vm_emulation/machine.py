"""One emulated VM: the startup script a provider rendered, run with bash as the VM's boot would run it.

The script is the real one (install command, exports, `exec` of the agent); only the VM's filesystem is mapped:
the on-instance paths it names (the instance disk and the agent's log) become folders of this VM under the test's
temporary directory. Every process of the VM carries a marker in its environment, so the VM can be switched off
whole, the trainer included (the agent starts it in a session of its own).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

import psutil

# The paths the providers' startup scripts use on an instance (the same for AWS, GCP and Azure).
ON_INSTANCE_DISK = "/var/lib/spotrun"
ON_INSTANCE_AGENT_LOG = "/var/log/spotrun-agent.log"
VM_MARKER_ENV = "SPOTRUN_EMULATED_VM"
# What a freshly booted image has in its environment; the script adds the rest.
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}


class BootError(RuntimeError):
    """The startup script cannot run on an emulated VM."""


def map_filesystem(script: str, disk: Path, agent_log: Path) -> str:
    """`script` with the instance's disk and log paths replaced by this VM's folders."""
    if ON_INSTANCE_DISK not in script or ON_INSTANCE_AGENT_LOG not in script:
        raise BootError(
            f"the startup script does not use {ON_INSTANCE_DISK} and {ON_INSTANCE_AGENT_LOG}; "
            "the emulator does not know where this VM's disk and log are"
        )
    return script.replace(ON_INSTANCE_DISK, str(disk)).replace(ON_INSTANCE_AGENT_LOG, str(agent_log))


class EmulatedVm:
    """A booted instance: `boot()` starts its startup script, `power_off()` kills every process it has."""

    def __init__(self, instance_id: str, zone: str, script: str, root: Path, metadata_env: Mapping[str, str]) -> None:
        self.instance_id = instance_id
        self.zone = zone
        self.root = root
        self.disk = root / "disk"
        self.agent_log = root / "agent.log"
        self.script_path = root / "startup.sh"
        self._script = script
        self._metadata_env = dict(metadata_env)
        self._marker = uuid.uuid4().hex
        self._boot: subprocess.Popen[bytes] | None = None

    def boot(self) -> EmulatedVm:
        self.root.mkdir(parents=True, exist_ok=True)
        self.script_path.write_text(map_filesystem(self._script, self.disk, self.agent_log))
        env = {**BASE_ENV, "HOME": str(self.root), **self._metadata_env, VM_MARKER_ENV: self._marker}
        self._boot = subprocess.Popen(
            ["bash", str(self.script_path)], env=env, cwd=self.root, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=open(self.root / "boot.log", "ab"), stderr=subprocess.STDOUT,
        )
        return self

    @property
    def running(self) -> bool:
        return self._boot is not None and self._boot.poll() is None

    def processes(self) -> list[psutil.Process]:
        """Every live process of this VM: the boot process's tree and whatever carries the VM's marker."""
        found: dict[int, psutil.Process] = {}
        if self._boot is not None:
            try:
                root = psutil.Process(self._boot.pid)
                for process in [root, *root.children(recursive=True)]:
                    found[process.pid] = process
            except psutil.NoSuchProcess:
                pass
        for process in psutil.process_iter():
            try:
                if process.environ().get(VM_MARKER_ENV) == self._marker:
                    found[process.pid] = process
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return [p for p in found.values() if _alive(p)]

    def power_off(self) -> None:
        """The VM is gone: every one of its processes is killed at once, nothing gets to clean up."""
        for _ in range(3):  # a process may fork while we kill; look again
            victims = self.processes()
            if not victims:
                break
            for process in victims:
                try:
                    process.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(victims, timeout=5)
        if self._boot is not None:
            try:
                self._boot.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def log_tail(self, chars: int = 3000) -> str:
        parts = []
        for path in (self.root / "boot.log", self.agent_log):
            if path.exists():
                parts.append(f"--- {path.name} ---\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

