"""Waiting in end-to-end tests for something the control plane and the instances do on their own clocks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, check: Callable[[], Any], timeout: float, explain: Callable[[], str]) -> Any:
    """`check()`'s first truthy answer within `timeout` seconds; else an AssertionError naming `what`, with
    `explain()` (the job's attempts, the instances' logs) for the reader."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{explain()}")
