import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from world import ScriptedPolicy, World  # noqa: E402


@pytest.fixture
def world(store, tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    return World(store, tmp_path)


@pytest.fixture
def scripted(monkeypatch):
    from spotrun import policy

    monkeypatch.setitem(policy._POLICIES, "scripted", ScriptedPolicy)
    ScriptedPolicy.asked, ScriptedPolicy.answer, ScriptedPolicy.placement = 0, None, None
    return ScriptedPolicy
