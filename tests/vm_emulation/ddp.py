"""The DDP example (examples/ddp) as the end-to-end tests run it: its final weights from a run never interrupted,
its ranks as plain processes on 127.0.0.1 with no spotrun platform, which every preempted run must end with."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

DDP = Path(__file__).resolve().parents[2] / "examples" / "ddp"


def uninterrupted_ddp(checkpoints: Path, nodes: int, env: dict[str, str]) -> dict:
    """final.json of `nodes` ranks trained from start to end (``env``: the trainer's settings), never preempted."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = {**os.environ, "STEP_SECONDS": "0", **env, "SPOTRUN_CHECKPOINT_DIR": str(checkpoints),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(nodes)}
    ranks = [
        subprocess.Popen([sys.executable, "train.py"], cwd=DDP, env={**base, "RANK": str(rank)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for rank in range(nodes)
    ]
    outputs = [rank.communicate(timeout=180)[0].decode() for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks), outputs
    return json.loads((checkpoints / "final.json").read_text())
