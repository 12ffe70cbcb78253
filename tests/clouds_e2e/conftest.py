"""Fixtures for the per-cloud end-to-end tests: each cloud's fake, a provider on it, and a VM emulator over it.

Nothing leaves the machine: the providers talk to their fakes on 127.0.0.1 (moto in-process for AWS), every
agent is pointed at its own fake metadata service on 127.0.0.1, and in-process code runs under a guard that
refuses any other host.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))  # fakes, fakes_gcp, fakes_azure, vm_emulation

from fakes_gcp import loopback_only  # noqa: E402

from spotrun.state import Store  # noqa: E402
from vm_emulation.digits import uninterrupted_run  # noqa: E402


@pytest.fixture(autouse=True)
def no_network() -> Iterator[None]:
    with loopback_only() as attempts:
        yield
    assert not attempts, f"the test tried to reach hosts beyond loopback: {attempts}"


@pytest.fixture(autouse=True)
def spotrun_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the controller keeps checkpoints (the store stands in for a bucket) and logs."""
    home = tmp_path / "home"
    monkeypatch.setenv("SPOTRUN_HOME", str(home))
    return home


@pytest.fixture
def cloud_store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield store
    store.dispose()



@pytest.fixture(scope="module")
def uninterrupted_digits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], Future[dict]]]:
    """The digits trainer's final.json never interrupted, as a future: the first call starts the run in a thread (a
    test calls it once nothing after races the job's trainer, e.g. as a notice window is waited out), later calls
    return the same future."""
    with ThreadPoolExecutor(1) as background:
        started: list[Future[dict]] = []

        def reference() -> Future[dict]:
            if not started:
                started.append(background.submit(uninterrupted_run, tmp_path_factory.mktemp("digits-reference")))
            return started[0]

        yield reference
