"""The controller lease is a compare-and-set: one holder at a time, taken over only after expiry or release."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from spotrun.state import Store
from spotrun.state import lease

TTL = 30.0


def acquire(store: Store, holder: str, now: float, name: str = "controller") -> bool:
    with store.session() as session:
        return lease.try_acquire(session, name, holder, pid=4242, url=f"http://{holder}", now=now, ttl=TTL)


def holder_of(store: Store, name: str = "controller") -> str | None:
    with store.session() as session:
        row = lease.read(session, name)
        return None if row is None else row.holder


def test_first_caller_creates_and_holds_the_lease(store: Store) -> None:
    assert holder_of(store) is None
    assert acquire(store, "a", now=100.0)
    with store.session() as session:
        row = lease.read(session, "controller")
        assert row is not None
        assert (row.holder, row.pid, row.url, row.acquired_at, row.expires_at) == (
            "a", 4242, "http://a", 100.0, 100.0 + TTL,
        )


def test_holder_renews_and_keeps_its_acquisition_time(store: Store) -> None:
    assert acquire(store, "a", now=100.0)
    assert acquire(store, "a", now=120.0)
    with store.session() as session:
        row = lease.read(session, "controller")
        assert row is not None and (row.acquired_at, row.expires_at) == (100.0, 120.0 + TTL)


def test_others_are_refused_until_expiry_then_take_over(store: Store) -> None:
    assert acquire(store, "a", now=100.0)
    assert not acquire(store, "b", now=100.0 + TTL - 1)
    assert not acquire(store, "b", now=100.0 + TTL)  # expires_at is still "now": not yet expired
    assert holder_of(store) == "a"
    assert acquire(store, "b", now=100.0 + TTL + 1)
    assert holder_of(store) == "b"
    assert not acquire(store, "a", now=100.0 + TTL + 2)  # the old holder has lost it
    with store.session() as session:
        row = lease.read(session, "controller")
        assert row is not None and row.acquired_at == 100.0 + TTL + 1


def test_release_frees_the_lease_only_for_its_holder(store: Store) -> None:
    assert acquire(store, "a", now=100.0)
    with store.session() as session:
        assert not lease.release(session, "controller", "b")
    assert holder_of(store) == "a"
    with store.session() as session:
        assert lease.release(session, "controller", "a")
        assert not lease.release(session, "controller", "a")
    assert holder_of(store) is None
    assert acquire(store, "b", now=101.0)  # long before the old expiry
    assert holder_of(store) == "b"


def test_leases_with_different_names_are_independent(store: Store) -> None:
    assert acquire(store, "a", now=1.0, name="one")
    assert acquire(store, "b", now=1.0, name="two")
    assert (holder_of(store, "one"), holder_of(store, "two")) == ("a", "b")


@pytest.mark.parametrize("bad", [dict(ttl=0.0), dict(ttl=-1.0), dict(holder=""), dict(name="")])
def test_bad_arguments_are_refused_with_a_clear_error(store: Store, bad: dict[str, object]) -> None:
    arguments: dict[str, object] = dict(name="controller", holder="a", pid=1, url=None, now=1.0, ttl=TTL) | bad
    with store.session() as session, pytest.raises(ValueError, match=next(iter(bad))):
        lease.try_acquire(session, **arguments)  # type: ignore[arg-type]


def contend(store: Store, holders: list[str], now: float, name: str) -> list[str]:
    """All holders call try_acquire at the same moment, each on its own connection; returns the winners."""
    start = threading.Barrier(len(holders))

    def attempt(holder: str) -> bool:
        start.wait(timeout=10)
        return acquire(store, holder, now=now, name=name)

    with ThreadPoolExecutor(len(holders)) as pool:
        results = list(pool.map(attempt, holders))
    return [holder for holder, won in zip(holders, results) if won]


def test_exactly_one_of_many_contenders_wins_a_new_then_an_expired_lease(store: Store) -> None:
    holders = [f"controller-{n}" for n in range(6)]
    for round_number in range(5):
        name = f"race-{round_number}"

        winners = contend(store, holders, now=100.0, name=name)  # nobody has the row yet: an insert race
        assert len(winners) == 1, f"round {round_number}, new lease: winners {winners}"
        assert holder_of(store, name) == winners[0]

        winners = contend(store, holders, now=100.0 + TTL + 1, name=name)  # the row exists, expired: an update race
        assert len(winners) == 1, f"round {round_number}, expired lease: winners {winners}"
        assert holder_of(store, name) == winners[0]
