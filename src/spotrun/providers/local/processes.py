"""Finding and killing an instance's processes, whatever process group or session they made.

A process is named by (pid, create_time) so that a reused pid is never mistaken for ours.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable

import psutil

from spotrun import libc

INSTANCE_ID_ENV = "SPOTRUN_INSTANCE_ID"
_PR_SET_CHILD_SUBREAPER = 36
_SAME_START_TOLERANCE = 0.05  # seconds; create_time is derived from clock ticks since boot

ProcessIdentity = tuple[int, float]  # (pid, create_time)


def identity(process: psutil.Process) -> ProcessIdentity:
    return process.pid, process.create_time()


def find_process(pid: int | None, started_at: float | None) -> psutil.Process | None:
    """The live (non-zombie) process with this pid and start time, or None if it is gone or the pid was reused."""
    if pid is None or started_at is None:
        return None
    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - started_at) > _SAME_START_TOLERANCE:
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def live_processes(identities: Iterable[ProcessIdentity]) -> list[psutil.Process]:
    found = (find_process(pid, started_at) for pid, started_at in identities)
    return [process for process in found if process is not None]


def live_descendants(process: psutil.Process) -> list[psutil.Process]:
    try:
        children = process.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return [child for child in children if _is_live(child)]


def marked_processes(instance_id: str) -> list[psutil.Process]:
    """Processes whose environment carries SPOTRUN_INSTANCE_ID=instance_id (the boot command and its offspring)."""
    marked = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(INSTANCE_ID_ENV) == instance_id and _is_live(process):
                marked.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return marked


def with_descendants(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    by_pid: dict[int, psutil.Process] = {}
    for process in processes:
        for member in [process, *live_descendants(process)]:
            by_pid.setdefault(member.pid, member)
    return list(by_pid.values())


def _is_live(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_processes(find: Callable[[], list[psutil.Process]], grace_seconds: float, rounds: int = 50) -> None:
    """SIGTERM everything `find` returns, wait up to `grace_seconds`, then SIGKILL until `find` returns nothing.

    `find` is asked again after every round: what forked while a round was killing is caught by the next.
    """
    if grace_seconds > 0:
        _signal_all(find(), signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and find():
            time.sleep(0.05)
    for _ in range(rounds):
        found = find()
        if not found:
            return
        _signal_all(found, signal.SIGKILL)
        psutil.wait_procs(found, timeout=1.0)
    remaining = find()
    if remaining:
        raise RuntimeError(f"could not kill processes {[process.pid for process in remaining]}")


def _signal_all(processes: Iterable[psutil.Process], signum: int) -> None:
    for process in processes:
        try:
            process.send_signal(signum)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process (Linux), so the process tree stays whole."""
    prctl = libc.function("prctl", (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong))
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def reap_children(keep: int | None = None) -> None:
    """Collect exited children (orphans reparented to a subreaper become ours), except `keep` (Popen's own)."""
    try:
        children = psutil.Process(os.getpid()).children()
    except psutil.Error:
        return
    for child in children:
        if child.pid == keep:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            continue
