"""How long a 3-node DDP job takes to train again after losing a node: from the replacement instance's launch to
every rank's first training step, on the local cloud (real CLI, controller, agents, gloo trainers).

    python benchmarks/multinode_recovery.py --rounds 4

Each round preempts one node (alternately the master and a worker) while the job trains, then measures, for the
generation that follows: replacement launched → its agent reported in → generation started (every node up) →
the last rank's first step done (the trainers' own "first step ... done at T" lines). Local instances boot in
about a second; on a cloud, add its boot time to the first figure.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "e2e"), str(TESTS)]  # as tests/e2e/conftest.py puts them: harness, then vm_emulation
from harness import Spotrun, ddp_job  # noqa: E402  (the end-to-end tests' driver of the real CLI and cloud)

from spotrun.state import Attempt, Generation  # noqa: E402

FIRST_STEP = re.compile(r"rank (\d+): first step (\d+) done at ([0-9.]+)")


def first_steps(world: Spotrun, after: float) -> dict[int, float]:
    """Each rank's first-step time after `after` (the generation's start)."""
    found: dict[int, float] = {}
    for rank, _, at in FIRST_STEP.findall(world.logs(1)):
        if float(at) >= after:
            found[int(rank)] = min(found.get(int(rank), float("inf")), float(at))
    return found


def wait(condition, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(what)


def one_round(world: Spotrun, node: int, generation: int) -> dict[str, float]:
    world.run("preempt", "1", "--node", str(node))
    started = wait(lambda: [g for g in world.rows(Generation, Generation.number) if g.number == generation + 1],
                   240, f"generation {generation + 1}")[0]
    replacement = max((a for a in world.rows(Attempt, Attempt.number) if a.node_rank == node), key=lambda a: a.number)
    steps = wait(lambda: (s := first_steps(world, started.started_at)) and len(s) == 3 and s, 240, "every rank training")
    training = max(steps.values())
    return {
        "node": node,
        "launch_to_agent_s": replacement.agent_started_at - replacement.started_at,
        "agent_to_generation_s": started.started_at - replacement.agent_started_at,
        "generation_to_training_s": training - started.started_at,
        "replacement_to_training_s": training - replacement.started_at,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        world = Spotrun(Path(tmp) / "home")
        try:
            world.run("launch", str(ddp_job(Path(tmp), epochs=400, step_seconds=0.1)))
            wait(lambda: world.rows(Generation, Generation.number) and len(first_steps(world, 0)) == 3, 240,
                 "generation 1 training")
            results = []
            for round_ in range(args.rounds):
                time.sleep(3)  # let it train a little
                results.append(one_round(world, node=0 if round_ % 2 == 0 else 2, generation=round_ + 1))
                print(json.dumps(results[-1]), flush=True)
            world.run("cancel", "1")
        finally:
            world.shutdown()
    summary = {key: statistics.median(r[key] for r in results) for key in results[0] if key != "node"}
    print(json.dumps({"rounds": len(results), "median": summary}, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
