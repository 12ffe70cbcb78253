"""What a node's torchrun writes into the job's log, run as the agent runs it (`node_command`): its ranks' lines
whole, and its stop at a preemption told in a line, not a traceback."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import spotrun
from spotrun.agent.config import GangConfig
from spotrun.agent.gang import GenerationOrder, free_port, node_command
from spotrun.agent.process import CommandProcess

TWO_RANKS = GangConfig(nnodes=2, node_rank=0, launcher="torchrun", procs_per_node=2)

PRINTING_RANK = """
import os, time
for i in range(2000):
    print(f"rank {os.environ['LOCAL_RANK']} line {i} " + "x" * 40)  # unbuffered: the text, then its line end
    if i % 50 == 0:
        time.sleep(0.001)
"""

STOPPING_RANK = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("saved", flush=True), sys.exit(75)))  # the SDK's answer
print("ready", flush=True)
time.sleep(120)
"""

CRASHING_RANK = "raise RuntimeError('rank crashed')\n"


def _torchrun(tmp_path: Path, rank_source: str) -> tuple[CommandProcess, list[str]]:
    """One node's torchrun with two ranks of rank_source (a world of one node: its ranks start without a peer)."""
    script = tmp_path / "rank.py"
    script.write_text(rank_source)
    order = GenerationOrder(number=1, state="running", master_addr="127.0.0.1", master_port=free_port(),
                            node_rank=0, nnodes=1)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",  # as many images set it
           "PYTHONPATH": str(Path(spotrun.__file__).parents[1])}  # this spotrun, from the command's folder too
    output: list[str] = []
    command = node_command(f"{sys.executable} {script}", TWO_RANKS, order)
    return CommandProcess(command, tmp_path, env, output.append).start(), output


def _finished(process: CommandProcess, output: list[str]) -> tuple[int, str]:
    code = process.wait(60)
    assert code is not None and process.drain_output(5)
    return code, "".join(output)


def test_two_ranks_printing_at_once_never_join_their_lines(tmp_path):
    """Both ranks wrote into the one pipe the agent reads: a print's text and its line end go in two writes, and
    the other rank's line landed between them."""
    code, text = _finished(*_torchrun(tmp_path, PRINTING_RANK))
    assert code == 0, text[-3000:]
    printed = [line for line in text.splitlines() if re.search(r"rank \d line", line)]
    assert len(printed) == 4000
    assert [line for line in printed if not re.fullmatch(r"rank [01] line \d+ x{40}", line)] == []


def test_a_stopped_torchrun_says_so_in_a_line_and_a_crashed_one_keeps_its_traceback(tmp_path):
    """torchrun ends a SIGTERM by letting SignalException out of its main: at every preemption its traceback read
    like a crash in the job's log."""
    process, output = _torchrun(tmp_path, STOPPING_RANK)
    while "".join(output).count("ready") < 2:
        time.sleep(0.05)
        assert process.is_running(), "".join(output)
    process.signal_group(signal.SIGTERM)  # as the agent stops a generation
    code, text = _finished(process, output)
    assert code == 1  # torchrun's, which the gang agent reads as saved (`_code_of_a_stop`)
    assert text.count("saved") == 2  # each rank's output after the signal still came
    assert "torchrun stopped on SIGTERM, after stopping its workers" in text
    assert "Traceback" not in text and "SignalException" not in text, text

    code, text = _finished(*_torchrun(tmp_path, CRASHING_RANK))
    assert code == 1
    assert "RuntimeError: rank crashed" in text and "Traceback" in text and "ChildFailedError" in text
