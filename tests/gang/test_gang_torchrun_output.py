"""What a node's torchrun writes into the job's log, run as the agent runs it (`node_command`): its ranks' lines
whole, and its stop at a preemption told in a line, not a traceback."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

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


HANGING_RANK = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a rank stuck in its save
print(f"pid {os.getpid()}", flush=True)
time.sleep(300)
"""

SLOW_SAVING_RANK = """
import signal, sys, time
def save(*_):
    time.sleep(35)  # a large checkpoint: longer than torchrun's own 30 s, well within EC2's 2-minute notice
    print("saved", flush=True)
    sys.exit(75)
signal.signal(signal.SIGTERM, save)
print("ready", flush=True)
time.sleep(300)
"""


def test_a_kill_at_the_stop_time_ends_torchruns_workers_too(tmp_path):
    """torchrun starts each worker in a session of its own: the SIGKILL of its group at the agent's stop time left
    the workers running, writing checkpoints and holding their GPUs into the next generation."""
    process, output = _torchrun(tmp_path, HANGING_RANK)
    while len(pids := re.findall(r"pid (\d+)", "".join(output))) < 2:
        time.sleep(0.05)
        assert process.is_running(), "".join(output)
    process.signal_group(signal.SIGKILL)
    assert process.wait(10) is not None
    deadline = time.time() + 10
    while (alive := [pid for pid in map(int, pids) if _running(pid)]) and time.time() < deadline:
        time.sleep(0.1)
    for pid in alive:  # not left behind by a failing run
        os.kill(pid, signal.SIGKILL)
    assert alive == []


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.soak
def test_torchrun_lets_its_workers_save_for_longer_than_its_own_30_seconds(tmp_path):
    """torchrun SIGKILLed its workers 30 s after its SIGTERM, whatever the notice left: the agent's stop time
    governs now (`TORCHRUN_SHUTDOWN_SECONDS`)."""
    process, output = _torchrun(tmp_path, SLOW_SAVING_RANK)
    while "".join(output).count("ready") < 2:
        time.sleep(0.05)
        assert process.is_running(), "".join(output)
    process.signal_group(signal.SIGTERM)
    code = process.wait(90)
    assert process.drain_output(5)
    text = "".join(output)
    assert code == 1 and text.count("saved") == 2, text[-3000:]
