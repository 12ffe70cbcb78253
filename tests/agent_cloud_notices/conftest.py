"""Fixtures for the cloud notice sources: the fake metadata services (tests/fakes), and the agent tests'
recording controller and agent runner (tests/agent/conftest.py), shared rather than copied."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))  # --import-mode=importlib puts nothing on sys.path; `fakes` lives in tests/

from fakes import FakeAzureEvents, FakeGceMetadata, FakeImds  # noqa: E402


def _agent_fixtures():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("spotrun_agent_test_fixtures", TESTS_DIR / "agent" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_agent = _agent_fixtures()
controller = _agent.controller
run_agent = _agent.run_agent
RecordingController = _agent.RecordingController
TOKEN = _agent.TOKEN


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    with FakeImds() as fake:
        yield fake


@pytest.fixture
def gce() -> Iterator[FakeGceMetadata]:
    with FakeGceMetadata() as fake:
        yield fake


@pytest.fixture
def azure() -> Iterator[FakeAzureEvents]:
    with FakeAzureEvents() as fake:
        yield fake
