"""Fixtures for the local cloud's tests: a provider on a tmp_path root that leaves nothing running.

Test files cannot import this module (pytest runs with --import-mode=importlib), so the helpers come
as the `cloud` fixture.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from spotrun.providers.base import InstanceInfo, LaunchRequest
from spotrun.providers.local import LocalProvider, ManualMarket


class Cloud:
    """A LocalProvider on a temporary root plus the helpers the tests share."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.provider = LocalProvider(root=root, market=ManualMarket(notice_seconds=0.5), shutdown_grace_seconds=0.5)

    @staticmethod
    def user_data(script: str = "", seconds: float = 60) -> dict[str, Any]:
        """A boot command that runs `script` (Python, cwd = the instance's disk) and then sleeps."""
        argv = [sys.executable, "-c", f"{script}\nimport time\ntime.sleep({seconds})"]
        return {"argv": argv, "env": {"GREETING": "hi"}}

    def request(self, token: str, *, zone: str = "local-a", market: str = "spot", **changes: Any) -> LaunchRequest:
        fields: dict[str, Any] = {
            "zone": zone,
            "market": market,
            "instance_type": "local.cpu",
            "client_token": token,
            "user_data": self.user_data(),
        }
        fields.update(changes)
        return LaunchRequest(**fields)

    def launch_running(self, token: str, **changes: Any) -> InstanceInfo:
        info = self.provider.launch(self.request(token, **changes))
        return self.wait_for_state(info.instance_id, "running")

    def wait_for_state(self, instance_id: str, state: str, timeout: float = 10.0) -> InstanceInfo:
        def reached() -> InstanceInfo | None:
            info = self.provider.describe(instance_id)
            return info if info.state == state else None

        return wait_for(reached, timeout, f"{instance_id} to be {state}")

    @staticmethod
    def wait_for(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
        return wait_for(condition, timeout, what)

    @staticmethod
    def alive(pid: int, started_at: float) -> bool:
        try:
            process = psutil.Process(pid)
            return abs(process.create_time() - started_at) < 0.05 and process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    @staticmethod
    def processes_marked_with(instance_id: str) -> list[int]:
        """Live processes carrying the instance's SPOTRUN_INSTANCE_ID, found independently of the provider."""
        found = []
        for process in psutil.process_iter():
            try:
                marked = process.environ().get("SPOTRUN_INSTANCE_ID") == instance_id
                if marked and process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process.pid)
            except psutil.Error:
                continue
        return found


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Cloud]:
    helpers = Cloud(tmp_path / "cloud")
    yield helpers
    for info in helpers.provider.list_instances():
        if info.state not in ("terminated", "unknown"):
            helpers.provider.terminate(info.instance_id)
