"""Wall time of `spotrun` commands that do little besides starting: two source trees side by side, interleaved.

    git worktree add /tmp/spotrun-old <commit>
    python benchmarks/cli_startup.py --old /tmp/spotrun-old/src          # this checkout's src is the new tree
    python benchmarks/cli_startup.py --old /tmp/spotrun-old/src --runs 20

Each command runs in a fresh interpreter (`python -c "from spotrun.cli.main import app; app()" ARGS`) with the
tree on PYTHONPATH and a temporary SPOTRUN_HOME of its own; one warm-up round per tree first (the store's creation,
bytecode caches), then `--runs` rounds, each running every command once per tree in turn, so that a busy machine
weighs on both alike. Prints the median per command and tree, and old/new as a ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NEW_TREE = HERE.parent / "src"
TRACE = NEW_TREE / "spotrun" / "data" / "traces" / "aws-10-26-2022_us-west-2a_v100_1.json"
UNREACHABLE_SERVER = {"SPOTRUN_SERVER": "http://127.0.0.1:9", "SPOTRUN_TOKEN": "spr_000000000000_x"}
COMMANDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "--help": (["--help"], {}),
    "simulate --help": (["simulate", "--help"], {}),
    "simulate (1 trace, greedy)": (["simulate", "--trace", str(TRACE), "--policy", "greedy", "--no-bound",
                                    "--every-hours", "200", "--processes", "1", "--json"], {}),
    "status (empty SQLite store)": (["status"], {}),
    "status (remote, server away)": (["status"], UNREACHABLE_SERVER),
}


def run_once(tree: Path, home: str, args: list[str], extra_env: dict[str, str]) -> float:
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOTRUN_")}
    env.update(PYTHONPATH=str(tree), SPOTRUN_HOME=home, COLUMNS="120", **extra_env)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from spotrun.cli.main import app; app()", *args], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - started
    if done.returncode != (1 if extra_env else 0):  # the remote command fails: nothing listens there
        sys.exit(f"{tree}: spotrun {' '.join(args)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="the src folder of the tree to compare with")
    parser.add_argument("--new", type=Path, default=NEW_TREE, help="the src folder measured (default: this checkout's)")
    parser.add_argument("--runs", type=int, default=10)
    options = parser.parse_args()
    trees = {"old": options.old.resolve(), "new": options.new.resolve()}
    homes = {name: tempfile.mkdtemp(prefix=f"spotrun-startup-{name}-") for name in trees}
    times: dict[tuple[str, str], list[float]] = {(tree, command): [] for tree in trees for command in COMMANDS}
    for round_number in range(options.runs + 1):
        for command, (args, extra_env) in COMMANDS.items():
            for tree, path in trees.items():
                took = run_once(path, homes[tree], args, extra_env)
                if round_number:  # round 0 warms up
                    times[(tree, command)].append(took)
    print(f"{'command':32s} {'old median':>10s} {'new median':>10s} {'old/new':>8s}   ({options.runs} runs, seconds)")
    for command in COMMANDS:
        old, new = (statistics.median(times[(tree, command)]) for tree in trees)
        print(f"{command:32s} {old:10.3f} {new:10.3f} {old / new:7.2f}x")


if __name__ == "__main__":
    main()
