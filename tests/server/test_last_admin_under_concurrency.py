"""Two admins demoting (or disabling) each other at the same moment, on real connections to both databases: one
change passes, the other is refused as leaving no admin (LastAdmin, a 409), never a database error, and an enabled
admin always remains. A check read outside the change's lock let both pass on SQLite (no admin left); on
PostgreSQL the admins' rows were locked in no set order, and two such changes deadlocked."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import select

from spotrun.server.users import LastAdmin, add_user, disable_user, set_admin
from spotrun.state import Store
from spotrun.state.models import User

ROUNDS = 12


def _demote(store: Store, name: str, by: str) -> None:
    set_admin(store, name, False, time.time(), actor=by)


def _disable(store: Store, name: str, by: str) -> None:
    disable_user(store, name, time.time(), actor=by)


def _restore(store: Store) -> None:
    with store.session() as session:
        for user in session.scalars(select(User)):
            user.is_admin, user.disabled_at = True, None


def _at_once(store: Store, change: Callable[[Store, str, str], None]) -> list[str]:
    """ann and bob, the two admins, each change the other once both are ready; what each call ended with."""
    ready, outcomes = threading.Barrier(2), {}

    def act(name: str, by: str) -> None:
        ready.wait()
        try:
            change(store, name, by)
            outcomes[by] = "done"
        except LastAdmin:
            outcomes[by] = "last admin"
        except Exception as error:  # noqa: BLE001 - the test reports any other ending
            outcomes[by] = f"{type(error).__name__}: {error}"

    threads = [threading.Thread(target=act, args=("bob", "ann")), threading.Thread(target=act, args=("ann", "bob"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return sorted(outcomes.values())


@pytest.mark.parametrize("change", [_demote, _disable], ids=["demote", "disable"])
def test_two_admins_changing_each_other_at_once_leave_one_admin(store: Store, change) -> None:
    for name in ("ann", "bob"):
        add_user(store, name, time.time(), admin=True)
    for _ in range(ROUNDS):
        outcomes = _at_once(store, change)
        with store.session() as session:
            admins = session.scalars(select(User.name).where(User.is_admin.is_(True), User.disabled_at.is_(None))).all()
        assert outcomes == ["done", "last admin"], outcomes
        assert len(admins) == 1, admins
        _restore(store)
