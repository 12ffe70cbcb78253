"""The trainer's exit is not held up by DataLoader workers that ignore the preemption signals.

When the interpreter exits, ``multiprocessing`` ends its daemonic children (DataLoader workers are) with SIGTERM and
waits for each without a timeout. A worker told to ignore SIGTERM (``ignore_preemption_signals``: the agent's
notice goes to the whole process group) never ends, and a trainer whose loader was still alive at its exit (one
made at module level, or ``persistent_workers=True``) hung there: after a preemption, its exit code 75 never came.
So such children are killed first: this module's exit handler, registered after ``multiprocessing``'s, runs before
it (exit handlers run last registered, first run). Children that would end at SIGTERM are left to it.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.util  # registers its exit handler on import: it must come before ours
import os
import signal
import threading
from contextlib import suppress
from pathlib import Path

KILLED_CHILD_WAIT_SECONDS = 5.0


def kill_children_deaf_to_sigterm() -> list[int]:
    """SIGKILL every daemonic child of this process that ignores SIGTERM, and reap it; their pids."""
    killed = []
    for child in multiprocessing.active_children():
        if child.daemon and child.pid is not None and ignores(child.pid, signal.SIGTERM):
            _quiet_child_deaths()
            with suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            child.join(KILLED_CHILD_WAIT_SECONDS)
            killed.append(child.pid)
    return killed


def _quiet_child_deaths() -> None:
    """PyTorch's SIGCHLD handler raises "DataLoader worker is killed by signal" for a worker that dies so; at the
    exit, killing them is the point."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def ignores(pid: int, signum: int) -> bool:
    """Whether process ``pid`` ignores ``signum`` (Linux's /proc; False where it cannot tell)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


atexit.register(kill_children_deaf_to_sigterm)
