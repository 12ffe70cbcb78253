"""The two-rank scenarios of tests/sdk/test_sdk_distributed.py in one process: `python sdk_two_ranks.py WORKDIR`.

Each scenario, a worker module's ``run_rank``, runs on two gloo ranks forked from this process (sdk_forked_ranks.py:
torch and the SDK imported once for all of them), in WORKDIR/<scenario>, one scenario after another. Each scenario's
ranks start from this process as it was before any scenario ran (nothing here trains, requests a stop or sets a
module's values), so the scenarios do not see each other. A scenario whose rank failed leaves what went wrong in
WORKDIR/<scenario>/failed.txt, and the others still run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sdk_forked_ranks  # imports what the forked ranks use, once
import sdk_distributed_exit_worker
import sdk_distributed_worker
import sdk_spread_tied_worker
import sdk_spread_worker

SCENARIOS = {
    "stop": sdk_distributed_worker.run_rank,
    "exit": sdk_distributed_exit_worker.run_rank,
    "spread": sdk_spread_worker.run_rank,
    "spread_tied": sdk_spread_tied_worker.run_rank,
}


def main(workdir: Path) -> None:
    for name, run_rank in SCENARIOS.items():
        folder = workdir / name
        folder.mkdir(parents=True)
        # the exit scenario's ranks leave through the interpreter's exit, where gloo groups left alive aborted them
        failure = sdk_forked_ranks.run(run_rank, 2, str(folder), interpreter_exit=name == "exit")
        if failure is not None:
            (folder / "failed.txt").write_text(failure)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
