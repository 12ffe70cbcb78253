"""A fork server for the crash-safety test: imports torch once, then for every "ROOT\tREPORT" line on stdin
forks a writer, prints its pid, waits for it (the test SIGKILLs it at a random moment) and prints "reaped".

The writer restores from ROOT, reports the restored step count to REPORT, then saves step after step
(synchronously) and appends each step count to REPORT only after ``save`` has returned, i.e. after commit.
Every tensor of the state holds the step count, so a restore can tell which save it came from.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

import spotrun


LARGE = 1 << 19  # float32 values: 2 MiB, above directio.MIN_BYTES


def writer_state(steps: int) -> tuple[spotrun.TrainingState, dict[str, object]]:
    """A small state whose every value is ``steps`` (to fill) and the dict the values live in. Its 2 MiB tensor
    takes the large-storage path of a save: page-aligned snapshot memory, written with O_DIRECT from there while
    the snapshot copy goes on."""
    model = torch.nn.Linear(16, 8)
    values: dict[str, object] = {
        "steps": steps, "buffer": torch.full((64,), float(steps)), "large": torch.full((LARGE,), float(steps)),
    }
    with torch.no_grad():
        model.weight.fill_(steps)
        model.bias.fill_(steps)
    return spotrun.torch_state(model=model, values=values), values


def write_forever(root: str, report_path: str) -> None:
    ckpt = spotrun.Checkpointer(root, every_steps=1, keep_last=2, signals=())
    state, _ = writer_state(0)
    start = ckpt.restore(state) or 0
    with open(report_path, "a") as report:
        report.write(f"{start}\n")
        report.flush()
        for steps in range(start + 1, start + 1_000_000):
            state, _ = writer_state(steps)
            ckpt.save(state, steps - 1)
            report.write(f"{steps}\n")
            report.flush()


def warm_up() -> None:
    """Run the whole path once so the forked writers do not pay for lazy imports."""
    with tempfile.TemporaryDirectory() as root:
        ckpt = spotrun.Checkpointer(root, signals=())
        state, _ = writer_state(1)
        ckpt.save(state, 0)
        ckpt.restore(state)
        ckpt.close()


def serve() -> None:
    torch.set_num_threads(1)  # the writers are forked, and a fork after an OpenMP parallel region (a large fill) hangs
    warm_up()
    for line in sys.stdin:
        root, report_path = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            try:
                write_forever(root, report_path)
            finally:
                os._exit(1)
        print(pid, flush=True)
        os.waitpid(pid, 0)
        print("reaped", flush=True)


if __name__ == "__main__":
    serve()
