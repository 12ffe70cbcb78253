"""One torchrun worker with an output pipe of its own: `python -m spotrun.agent.rank_output COMMAND...`.

torchrun's workers all write to the one pipe the agent reads, so a line of one rank could be joined with another's
(a Python with PYTHONUNBUFFERED set writes a print's text and its line end in two writes; a full buffer is written
out wherever it ends). Under this, a worker writes to a pipe of its own, and its output goes on in whole lines
(`spotrun.agent.lines`), each write at most PIPE_BUF bytes of them, which a pipe never interleaves with another's.

torchrun stops a worker by signalling its process group, this process and the command: the command answers the
signal (the SDK saves and ends 75) while this process goes on copying its output, and then ends as the command did.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading

from spotrun.agent.lines import copy_whole_lines

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DRAIN_SECONDS = 2.0  # for output still coming once the command ended (a child of it that holds the pipe open)
NOT_STARTED_EXIT_CODE = 127  # as a shell ends for a command it cannot run


def write_whole(data: bytes, fd: int = 1) -> None:
    """Whole lines, written PIPE_BUF bytes at most at a time (a longer line goes in pieces); nothing when the reader
    is gone, so that the command is never held up by its output."""
    try:
        while data:
            piece = data[: select.PIPE_BUF]
            if len(data) > len(piece) and (end := max(piece.rfind(b"\n"), piece.rfind(b"\r")) + 1):
                piece = piece[:end]
            data = data[os.write(fd, piece) :]
    except OSError:
        pass


def run(command: list[str]) -> int:
    """Run `command` with its output copied in whole lines; its exit code (negative: ended by that signal)."""
    for signum in STOP_SIGNALS:  # a handler, not SIG_IGN, which the command would inherit
        signal.signal(signum, lambda *_: None)
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen(command, stdout=write_end, stderr=write_end)
    except OSError as exc:
        print(f"spotrun: cannot start {command[0]}: {exc}", file=sys.stderr, flush=True)
        return NOT_STARTED_EXIT_CODE
    finally:
        os.close(write_end)
    copier = threading.Thread(target=copy_whole_lines, args=(read_end, write_whole), name="rank-output", daemon=True)
    copier.start()
    code = child.wait()
    copier.join(DRAIN_SECONDS)
    return code


def end_as(code: int) -> int:
    """Exit as the command did: with its code, or killed by its signal (torchrun reports the signal then)."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m spotrun.agent.rank_output COMMAND [ARG...]")
    sys.exit(end_as(run(sys.argv[1:])))
