"""torchrun, as the agent starts it on each node of a `launcher: torchrun` job:
`python -m spotrun.agent.torchrun_launch TORCHRUN_ARGS...`.

Stopped by a signal (the agent's SIGTERM at a preemption, or at the end of a generation), torchrun stops its
workers and then lets its SignalException out of its main: a traceback in the job's log at every preemption, which
read like a crash although it is how torchrun always ends on a signal. Here that one exception ends torchrun with a
line instead, and with the exit code it ends with anyway (1, which the gang agent reads as saved:
`GangAgent._code_of_a_stop`). Every other error, a failed worker's report included, keeps its traceback.
"""

from __future__ import annotations

import sys

SIGNALLED_EXIT_CODE = 1  # torchrun's, when its SignalException goes uncaught


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException  # the agent itself never imports torch
    from torch.distributed.run import main as torchrun

    try:
        torchrun(argv)
    except SignalException as stop:
        print(f"torchrun stopped on {stop.sigval.name}, after stopping its workers (an asked-for stop, not a crash)",
              file=sys.stderr, flush=True)
        return SIGNALLED_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
