"""Helpers shared by the cloud notice tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

from spotrun.agent.notices import Notice, NoticeSource

T = TypeVar("T")


def refused_url() -> str:
    """A loopback URL where nothing listens: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def wait_until(probe: Callable[[], T], timeout: float = 5.0, step: float = 0.02) -> T:
    """The first truthy result of `probe()`, or an AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no result in {timeout}s (last: {result!r})")
        time.sleep(step)


def poll_for_notice(source: NoticeSource, timeout: float = 5.0) -> Notice:
    notice = wait_until(source.poll, timeout)
    assert notice is not None
    return notice
