import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from world import ScriptedPolicy, World  # noqa: E402

# Modules whose PostgreSQL half is a soak run (`make soak`), to keep the suite under 15 minutes: they test the
# controller's decisions (moves, deadlines, spot news, repricing, why a job failed, what is notified), and their
# SQLite half stays in the suite. The
# PostgreSQL half of test_controller_ticks, test_controller_gang, test_controller_workers and test_reclaim_billing
# stays too. A query of these modules' paths that only PostgreSQL refuses (an ORDER BY it needs, a type it is
# strict about) would show only in `make soak`.
DECISIONS_ONLY = {
    "test_controller_gang_moves.py", "test_deadline_progress.py", "test_controller_moves.py", "test_spot_news.py",
    "test_rebalance_moves.py", "test_refused_tries_folded.py", "test_spot_repricing.py", "test_start_failure_reasons.py",
    "test_notify_detection.py",
}


@pytest.hookimpl(tryfirst=True)  # before `-m 'not soak'` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        here = item.path.parent == Path(__file__).parent and item.path.name in DECISIONS_ONLY
        if here and callspec and callspec.params.get("database_url") == "postgresql":
            item.add_marker(pytest.mark.soak)


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
