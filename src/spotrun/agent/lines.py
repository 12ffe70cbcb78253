"""Output handed on in whole lines, so that what is written beside it (another rank's output, the agent's own lines,
another node's text in `spotrun logs -f`) never lands inside a line.

A line ends at "\\n" or "\\r" (a progress bar redraws itself after a "\\r": each redraw flows as a line of its own).
A line that stops short waits for its end, and is handed on anyway once no more output came for PARTIAL_LINE_SECONDS
(a prompt, a print without a line end) or once it is longer than MAX_LINE_BYTES: only such a line can still be
joined with other text.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable

READ_SIZE = 64 * 1024
PARTIAL_LINE_SECONDS = 1.0
MAX_LINE_BYTES = 64 * 1024


class WholeLines:
    """Bytes in, whole lines out; the unended rest waits for its end."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max_line_bytes = max_line_bytes
        self._waiting = bytearray()

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    def add(self, data: bytes) -> bytes:
        """The lines `data` completes (b"" when none), or everything when the unended rest is longer than a line
        may wait for."""
        self._waiting += data
        # a "\r" last may be the first half of a "\r\n": it waits for the next byte
        end = max(self._waiting.rfind(b"\n"), self._waiting.rfind(b"\r", 0, len(self._waiting) - 1)) + 1
        if len(self._waiting) - end > self._max_line_bytes:
            end = len(self._waiting)
        lines = bytes(self._waiting[:end])
        del self._waiting[:end]
        return lines

    def rest(self) -> bytes:
        """The unended rest, handed on as it is."""
        rest = bytes(self._waiting)
        self._waiting.clear()
        return rest


def copy_whole_lines(fd: int, emit: Callable[[bytes], None], partial_wait: float = PARTIAL_LINE_SECONDS) -> None:
    """Read `fd` until it is closed, emitting its output in whole lines as they come (see the module's docstring)."""
    lines = WholeLines()
    while True:
        if lines.waiting and not _readable(fd, partial_wait):
            emit(lines.rest())
            continue
        data = os.read(fd, READ_SIZE)
        if not data:
            break
        if complete := lines.add(data):
            emit(complete)
    if rest := lines.rest():
        emit(rest)


def _readable(fd: int, timeout: float) -> bool:
    """Whether fd has output (or is closed) within timeout; poll, not select: an agent's fd may be above 1023."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))
