"""Where a reader that follows events by id may safely move its cursor to.

PostgreSQL hands an event its id when it is inserted, not when its transaction commits: a transaction holding id 5
can commit after another that holds id 6. A follower that read 6 and moved its cursor past it (`?after=6`) would
never see 5. So while a gap in the ids is followed by a visible event, and some other transaction that has written
is still open (the gap may be its), a follower is given events only up to the gap. A gap with no writer open is one
whose transaction rolled back: it stays a gap for good, and is passed. The database says which transactions are
open (`pg_stat_activity`); the events' own times would not do, as some are stamped with an earlier moment than
their insertion (an attempt's end, at the time the cloud gave).

SQLite writes one transaction at a time: there, ids are visible in order, and nothing is held back.
"""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from spotrun.state.models import Event

# How far back from the newest id gaps are looked for: a gap further back is older than a transaction lasts.
TAIL_IDS = 1000

_OTHER_WRITERS_OPEN = text(
    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
    "AND backend_xid IS NOT NULL AND pid <> pg_backend_pid())"
)


def first_unsettled_id(session: Session, after_id: int) -> int | None:
    """The smallest event id past `after_id` that is not visible while a later one is, when a transaction that may
    still commit it is open: events from it on are not to be handed to a follower yet. None when there is none."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    gap = _first_gap(session, after_id)
    if gap is None or not session.scalar(_OTHER_WRITERS_OPEN):
        return None
    return gap


def _first_gap(session: Session, after_id: int) -> int | None:
    newest = session.scalar(select(func.max(Event.id)))
    if newest is None or newest <= after_id:
        return None
    start = max(after_id, newest - TAIL_IDS)
    expected = after_id + 1 if start == after_id else None  # where the window starts past the cursor, unknown
    for event_id in session.scalars(select(Event.id).where(Event.id > start).order_by(Event.id)):
        if expected is not None and event_id != expected:
            return expected
        expected = event_id + 1
    return None
