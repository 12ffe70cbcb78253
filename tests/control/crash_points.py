"""The controller's side effects counted, and a crash injected at the N-th: every call to its cloud and every store
transaction it commits is a point before the effect and a point after it. Armed with N, the N-th point raises
`Crash` (a BaseException: the tick catches Exception, and nothing in the controller catches more), as if the
controller's process had died there."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

from sqlalchemy import event
from sqlalchemy.orm import Session

from memory_cloud import Crash
from spotrun.state import Store

# The cloud calls that change the cloud, and those that only read it. A crash next to a read leaves the store and the
# cloud as a crash next to the effect before or after it does: the suite crashes at the effects, a soak run at both.
CLOUD_EFFECTS = ("launch", "terminate")
CLOUD_READS = ("describe", "find_by_token", "list_instances", "zones")


class CrashPoints:
    """Numbers the points the controller passes (1, 2, ...), its restarts' after its own, and raises Crash at each
    point in `crash_at`."""

    def __init__(self, crash_at: Collection[int] = ()) -> None:
        self.crash_at = frozenset(crash_at)
        self.passed: list[str] = []  # what each point was, in order: passed[N - 1] is point N
        self.commits = 0

    def next_commit(self) -> str:
        self.commits += 1
        return f"commit #{self.commits}"

    def point(self, what: str) -> None:
        self.passed.append(what)
        if len(self.passed) in self.crash_at:
            raise Crash(f"point {len(self.passed)}: {what}")


class WriteWatch:
    """What a session wrote: the objects it flushed (events by their kind) and the tables of the INSERT, UPDATE and
    DELETE statements it ran."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.written: list[str] = []
        event.listen(session, "after_flush", self._flushed)
        event.listen(session, "do_orm_execute", self._executed)

    def _flushed(self, session: Session, flush_context) -> None:
        self.written += _names(session)

    def _executed(self, state) -> None:
        if state.is_insert or state.is_update or state.is_delete:
            self.written.append(f"{state.statement.table.name}*")

    def pending(self) -> list[str]:
        """What the commit will write; empty for a transaction that wrote nothing."""
        return self.written + _names(self.session)


def _names(session: Session) -> list[str]:
    changed = [*session.new, *(o for o in session.dirty if session.is_modified(o)), *session.deleted]
    return [f"{type(o).__name__}:{o.kind}" if type(o).__name__ == "Event" else type(o).__name__ for o in changed]


class CountingStore:
    """The controller's store: each transaction that writes is a point before its commit (a crash there rolls it
    back) and one after. Read-only transactions are no points: a crash in one is a crash at the next point."""

    def __init__(self, store: Store, points: CrashPoints) -> None:
        self._store = store
        self._points = points

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._store.session() as session:
            watch = WriteWatch(session)
            yield session
            written = watch.pending()
            commit = f"{self._points.next_commit()} ({', '.join(sorted(set(written)))})" if written else None
            if commit is not None:
                self._points.point(f"before {commit}")
        if commit is not None:
            self._points.point(f"after {commit}")


class CountingCloud:
    """The controller's cloud: each call named in `counted` is a point before it and one after."""

    def __init__(self, cloud, points: CrashPoints, counted: tuple[str, ...]) -> None:
        self._cloud = cloud
        self._points = points
        self._counted = counted

    def __getattr__(self, name: str):
        attribute = getattr(self._cloud, name)
        if name not in self._counted:
            return attribute

        def counted_call(*args, **kwargs):
            self._points.point(f"before {name}{_shown(args)}")
            result = attribute(*args, **kwargs)
            self._points.point(f"after {name}{_shown(args)}")
            return result

        return counted_call


def _shown(args: tuple) -> str:
    """The call's arguments as a trace shows them, the same in every run: an instance id, or a launch's market and
    zone (not its client token, drawn at random)."""
    if not args:
        return "()"
    first = args[0]
    if hasattr(first, "client_token"):
        return f"({first.market} in {first.zone})"
    return f"({first!r})"
