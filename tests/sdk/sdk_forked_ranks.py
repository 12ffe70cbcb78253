"""Ranks forked from a process that has imported torch, for the workers of the distributed tests.

With the spawn start method every rank imported torch, torch.distributed.tensor and spotrun again (~2-3 s of CPU
apiece), then torch._dynamo (which DDP's constructor and FSDP import) and the SDK's modules on first use (~1 s more).
Importing this module imports them, once; ``run`` forks the ranks. The process that forks must not have computed
anything with torch: the forks would copy its OpenMP pool, and a fork after an OpenMP parallel region hangs.

A rank ends with ``os._exit``, as multiprocessing's forked processes do, unless told to leave through the
interpreter's exit, as a spawned rank did: there a gloo group left alive aborts the rank (SIGABRT), which fails its run;
but tearing torch's modules down costs ~1 s of CPU a rank.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo  # noqa: F401  (imported here, once: see above)
import torch.distributed.tensor  # noqa: F401  (a save imports it)

from spotrun.sdk import checkpointer  # noqa: F401  (the SDK's modules, which spotrun imports on first use)


def run(function: Callable[..., None], ranks: int, *args: Any, interpreter_exit: bool = False) -> str | None:
    """``function(rank, *args)`` on ``ranks`` forked processes; None once every one has exited 0, else what went
    wrong (each failed rank's traceback or exit code); the others are killed at the first failure, as
    ``torch.multiprocessing.spawn`` does, rather than left waiting in a collective. With ``interpreter_exit`` the
    ranks leave through ``sys.exit``: the caller's frames unwind in them, so it must not catch SystemExit."""
    pids: dict[int, int] = {}
    read_end, write_end = os.pipe()
    for rank in range(ranks):
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            code = 0
            try:
                function(rank, *args)
            except BaseException:  # noqa: BLE001  (reported to the parent)
                os.write(write_end, f"rank {rank}: {traceback.format_exc()}\n".encode())
                code = 1
            if interpreter_exit:
                sys.exit(code)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        pids[pid] = rank
    os.close(write_end)
    failures: list[str] = []
    while pids:
        pid, status = os.wait()
        code = os.waitstatus_to_exitcode(status)
        rank = pids.pop(pid)
        if code != 0:
            failures.append(f"rank {rank} exited with {code}")
            for other in pids:
                os.kill(other, signal.SIGKILL)
    with os.fdopen(read_end, "rb") as reported:
        tracebacks = reported.read().decode(errors="replace")
    return "\n".join([tracebacks, *failures]).strip() if failures else None
