import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parents[1]))  # vm_emulation


import pytest  # noqa: E402

from harness import Spotrun  # noqa: E402


@pytest.fixture
def spotrun(tmp_path, monkeypatch):
    """A spotrun home of the test's own, whose controller daemon is stopped after it."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))  # in-process reads see the same home
    world = Spotrun(tmp_path / "home")
    yield world
    world.shutdown()
