"""Controller workers' agents' APIs (`state.workers`): the live ones, newest first, each once."""

from __future__ import annotations

from spotrun.state import workers
from spotrun.state.models import ControllerWorker


def test_live_workers_are_named_newest_first_and_a_gone_or_withdrawn_one_is_not(store):
    with store.session() as session:
        workers.announce(session, "w1", "http://one:1", now=100.0, ttl=30.0)
        workers.announce(session, "w2", "http://two:2", now=110.0, ttl=30.0)
        workers.announce(session, "w3", "http://two:2", now=108.0, ttl=60.0)  # behind the same address, till 168
    with store.session() as session:
        assert workers.agent_urls(session, now=120.0) == ["http://two:2", "http://one:1"]
        assert workers.agent_urls(session, now=135.5) == ["http://two:2"]  # w1's announcement expired at 130
        workers.announce(session, "w1", "http://one:1", now=136.0, ttl=30.0)  # renewed
        workers.withdraw(session, "w2")
    with store.session() as session:
        assert workers.agent_urls(session, now=137.0) == ["http://two:2", "http://one:1"]  # w3's, then w1's


def test_a_worker_gone_for_a_day_is_forgotten_at_the_next_announcement(store):
    with store.session() as session:
        workers.announce(session, "old", "http://old:1", now=0.0, ttl=30.0)
        workers.announce(session, "new", "http://new:1", now=30.0 + workers.FORGOTTEN_AFTER + 1, ttl=30.0)
    with store.session() as session:
        assert [row.worker for row in session.query(ControllerWorker)] == ["new"]


def test_an_agent_is_told_of_a_few_workers_at_most(store):
    with store.session() as session:
        for number in range(workers.MAX_AGENT_URLS + 3):
            workers.announce(session, f"w{number}", f"http://w{number}:1", now=100.0 + number, ttl=30.0)
    with store.session() as session:
        urls = workers.agent_urls(session, now=120.0)
    assert len(urls) == workers.MAX_AGENT_URLS and urls[0] == f"http://w{workers.MAX_AGENT_URLS + 2}:1"
