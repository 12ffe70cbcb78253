"""The user's command: `bash -c` in a new session (its own process group), stdout and stderr merged.

Output is handed to a callback in whole lines as they come (`spotrun.agent.lines`: a carriage return ends a line
too, so progress bars flow), decoded as UTF-8 with replacement characters.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from spotrun.agent.lines import copy_whole_lines

log = logging.getLogger(__name__)


class CommandProcess:
    def __init__(self, command: str, cwd: Path, env: Mapping[str, str], on_output: Callable[[str], None]) -> None:
        self.command = command
        self._cwd = cwd
        self._env = dict(env)
        self._on_output = on_output
        self._popen: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self._running().pid

    @property
    def returncode(self) -> int:
        """The exit code of a command that has exited (negative: killed by that signal)."""
        code = self._running().returncode
        if code is None:
            raise RuntimeError("the command is still running")
        return code

    def start(self) -> CommandProcess:
        self._popen = subprocess.Popen(
            ["bash", "-c", self.command],
            cwd=self._cwd,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._forward_output, name="spotrun-output", daemon=True)
        self._reader.start()
        return self

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (negative: killed by that signal), or None if still running after timeout."""
        try:
            return self._running().wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, signum: signal.Signals) -> None:
        """Send signum to the command's whole process group (children included). A SIGKILL also reaches every
        process the group started outside it (`_strays`): torchrun starts each worker in a session of its own, and
        a worker left running once torchrun is killed would go on writing checkpoints and holding its GPU."""
        strays = _strays(self._running().pid) if signum == signal.SIGKILL else []
        try:
            os.killpg(self._running().pid, signum)
        except ProcessLookupError:
            pass  # the group is already gone
        except PermissionError:
            log.warning("not allowed to signal process group %d", self._running().pid)
        for stray in strays:
            with contextlib.suppress(psutil.Error):
                stray.kill()

    def group_alive(self) -> bool:
        """Whether any process of the command's group is left (a child it started, once it exited itself)."""
        if self._popen is None:
            return False
        try:
            os.killpg(self._running().pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def drain_output(self, timeout: float) -> bool:
        """Wait until the command's output pipe is closed; False if a leftover child still holds it open."""
        if self._reader is None:
            return True
        self._reader.join(timeout)
        return not self._reader.is_alive()

    def _running(self) -> subprocess.Popen[bytes]:
        if self._popen is None:
            raise RuntimeError("the command was not started")
        return self._popen

    def _forward_output(self) -> None:
        stream = self._running().stdout
        assert stream is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with stream:  # read through its descriptor: whole lines wait for their end (`copy_whole_lines`)
            copy_whole_lines(stream.fileno(), lambda data: self._on_output(decoder.decode(data)))
        self._on_output(decoder.decode(b"", final=True))


def _strays(group: int) -> list[psutil.Process]:
    """The processes the members of process group `group` started, at any depth, that are in another group."""
    members = [process for process in psutil.process_iter() if _group_of(process) == group]
    found: dict[int, psutil.Process] = {}
    for member in members:
        with contextlib.suppress(psutil.Error):
            found.update((child.pid, child) for child in member.children(recursive=True) if _group_of(child) != group)
    return list(found.values())


def _group_of(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None
