"""How the ranks of a two-node DDP job exit when they are stopped: exit codes over many runs.

    .venv/bin/python benchmarks/ddp_exit_codes.py [--runs 40] [--signal-ranks 1|2] [--load N]

Each run starts examples/ddp/train.py as two local gloo ranks, waits until both have trained a step, sends SIGTERM
to rank 0 (``--signal-ranks 1``: the other learns it through the SDK's agreement) or to both, and records the exit
codes, with N busy-looping processes (``--load``) competing for the cores throughout. Every rank should save and exit
75 ("resume me"). A rank that dies by a signal after saving (-6: SIGABRT from a gloo group torn down during the
interpreter's exit) is a failed command to the controller. Prints the runs with another code, then the count of each
pair of codes. docs/architecture.md ("Trainer ↔ agent") quotes copies of it run side by side, with the code before
the fix through ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spotrun.agent.gang import free_port

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "ddp" / "train.py"


def one_run(signal_ranks: int) -> tuple[tuple[int, ...], list[str]]:
    """The ranks' exit codes and the last lines each printed."""
    port, folder = free_port(), tempfile.mkdtemp(prefix="spotrun-ddp-exit-")
    ranks = []
    for rank in range(2):
        env = dict(
            os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank), EPOCHS="10",
            STEP_SECONDS="0.02", SPOTRUN_CHECKPOINT_DIR=folder,
        )
        ranks.append(subprocess.Popen(
            [sys.executable, "-u", str(TRAIN)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    printed = ["", ""]
    for rank, process in enumerate(ranks):
        for line in process.stdout:
            printed[rank] += line
            if "first step" in line:
                break
    time.sleep(random.uniform(0.0, 0.5))  # stop them at different moments of a step
    for process in ranks[:signal_ranks]:
        process.send_signal(signal.SIGTERM)
    for rank, process in enumerate(ranks):
        printed[rank] += process.communicate(timeout=120)[0]
    return tuple(process.returncode for process in ranks), [text.strip().splitlines()[-1:] for text in printed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--signal-ranks", type=int, choices=(1, 2), default=2)
    parser.add_argument("--load", type=int, default=0, help="busy-looping processes to run alongside")
    args = parser.parse_args()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        print_counts(args.runs, args.signal_ranks)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def print_counts(runs: int, signal_ranks: int) -> None:
    counts: collections.Counter[tuple[int, ...]] = collections.Counter()
    for run in range(runs):
        codes, last_lines = one_run(signal_ranks)
        counts[codes] += 1
        if set(codes) != {75}:
            print(f"run {run}: exit codes {codes}; last lines {last_lines}", flush=True)
    print(", ".join(f"{codes}: {count}" for codes, count in counts.most_common()))


if __name__ == "__main__":
    main()
