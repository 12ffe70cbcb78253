"""The VM emulator's own promises: a startup script runs in the VM's folder, and switching the VM off leaves none of
its processes behind, also those that left its process tree's session."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from vm_emulation import BootError, EmulatedVm, map_filesystem

SCRIPT = """#!/bin/bash
set -euo pipefail
mkdir -p /var/lib/spotrun
cd /var/lib/spotrun
echo "$SPOTRUN_AWS_METADATA_URL" > metadata-url
setsid sleep 300 &
exec sleep 300 >>/var/log/spotrun-agent.log 2>&1
"""


def test_the_instance_paths_become_the_vms_folders(tmp_path: Path) -> None:
    mapped = map_filesystem(SCRIPT, tmp_path / "disk", tmp_path / "agent.log")

    assert "/var/lib/spotrun" not in mapped and "/var/log/spotrun-agent.log" not in mapped
    assert f"cd {tmp_path / 'disk'}" in mapped and f">>{tmp_path / 'agent.log'}" in mapped


def test_a_script_without_the_instance_paths_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(BootError, match="/var/lib/spotrun"):
        map_filesystem("#!/bin/bash\nexec true\n", tmp_path / "disk", tmp_path / "agent.log")


def sleepers(vm: EmulatedVm) -> int:
    names = []
    for process in vm.processes():
        try:
            names.append(process.name())
        except psutil.NoSuchProcess:  # e.g. the script's mkdir, done meanwhile
            continue
    return names.count("sleep")


def test_power_off_kills_every_process_of_the_vm(tmp_path: Path) -> None:
    vm = EmulatedVm("i-0123456789abcdef0", "us-east-1a", SCRIPT, tmp_path / "vm", {"SPOTRUN_AWS_METADATA_URL": "http://127.0.0.1:9"})
    vm.boot()
    try:
        deadline = time.monotonic() + 10
        while sleepers(vm) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sleepers(vm) == 2, vm.log_tail()  # the exec'd "agent" and the one in a session of its own
        assert (vm.disk / "metadata-url").read_text().strip() == "http://127.0.0.1:9"
    finally:
        vm.power_off()

    assert vm.processes() == [] and not vm.running
