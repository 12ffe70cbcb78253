"""`make demo-ddp`: a 3-node DDP job on local spot instances loses its master, then a worker, and still ends
with the weights of a run that was never interrupted.

1. Reference: train.py on three plain processes (127.0.0.1), no spotrun control plane.
2. `spotrun launch job.yaml`: three local instances, each with its own loopback address.
3. While it trains, `spotrun preempt 1 --node 0` (the master), later `--node 2` (a worker): each time only that
   node is replaced, and every rank resumes from the checkpoint all of them committed.
4. The final weights' SHA-256 must equal the reference's.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import fsspec
from rich.console import Console

from spotrun.sdk.layout import list_committed

HERE = Path(__file__).resolve().parent
HOME = HERE.parents[1] / ".spotrun-demo-ddp"
STORE = HOME / "checkpoints" / "1-digits-ddp"  # job 1's checkpoints (job.yaml's name)
ENV = {"EPOCHS": "30", "CHECKPOINT_EVERY": "10"}  # as job.yaml and train.py's default (STEP_SECONDS only slows it)
WIDTH = 150  # room for the per-node status table where the output is no terminal (rich takes 80 there: it wrapped)
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else WIDTH)


def spotrun(*args: str) -> str:
    """The CLI's output, its tables as wide as this demo's console (the CLI's own output is a pipe here)."""
    wide = {**os.environ, "COLUMNS": str(console.width)}
    return subprocess.run([sys.executable, "-m", "spotrun.cli.main", *args], check=True, capture_output=True,
                          text=True, env=wide).stdout


def status() -> dict:
    return json.loads(spotrun("status", "1", "--json"))[0]


def reference_run() -> dict:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = HOME / "reference"
    env = {**os.environ, **ENV, "SPOTRUN_CHECKPOINT_DIR": str(folder), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "WORLD_SIZE": "3"}
    ranks = [subprocess.Popen([sys.executable, "train.py"], cwd=HERE, env={**env, "RANK": str(rank)},
                              stdout=subprocess.DEVNULL) for rank in range(3)]
    if any(rank.wait() != 0 for rank in ranks):
        raise SystemExit("the reference run failed")
    return json.loads((folder / "final.json").read_text())


def newest_committed_step() -> int:
    return max(committed_step for committed_step, _ in list_committed(fsspec.filesystem("file"), str(STORE)))


def wait_until(check, what: str, timeout: float = 240) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        row = status()
        if check(row):
            return row
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    os.environ["SPOTRUN_HOME"] = str(HOME)
    console.rule("1 · an uninterrupted 3-rank reference run")
    reference = reference_run()
    console.print(f"reference sha256 {reference['sha256'][:16]}…")

    console.rule("2 · spotrun launch examples/ddp/job.yaml")
    console.out(spotrun("launch", str(HERE / "job.yaml")).strip(), highlight=False)
    step = -1
    for preemptions, node, who in ((1, 0, "the master"), (2, 2, "a worker")):
        row = wait_until(lambda r, s=step: r["state"] == "RUNNING" and (r["checkpoint_step"] or -1) > s,
                         "the gang to train and checkpoint")
        step = row["checkpoint_step"]
        console.rule(f"3 · preempting node {node} ({who}) at checkpoint step {step}")
        spotrun("preempt", "1", "--node", str(node))
        wait_until(lambda r, p=preemptions: r["preemptions"] >= p and r["state"] == "RUNNING", "the gang again")
        # the stop committed a newer checkpoint, which the new generation resumed from: the next preemption waits
        # for one this generation trains to, or it would land while its ranks still start
        step = newest_committed_step()
    done = wait_until(lambda r: r["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), "the end", timeout=600)
    console.out(spotrun("status", "1").rstrip(), highlight=False)  # as the CLI wrote it: no markup, no new wraps

    console.rule("4 · result")
    final = json.loads((STORE / "final.json").read_text())
    console.print(f"final weights sha256      {final['sha256']}\nuninterrupted run sha256  {reference['sha256']}")
    equal = done["state"] == "SUCCEEDED" and final["sha256"] == reference["sha256"]
    console.print("[green]equal: every rank resumed exactly[/]" if equal else "[red]NOT equal[/]")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
