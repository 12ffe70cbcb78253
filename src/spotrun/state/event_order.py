"""Where a reader that follows events by id may safely move its cursor to.

PostgreSQL hands an event its id when it is inserted, not when its transaction commits: a transaction holding id 5
can commit after another that holds id 6. A follower that read 6 and moved its cursor past it (`?after=6`) would
never see 5. So while a gap in the ids is followed by a visible event, and a transaction that has written and was
open when this process first saw the gap is still open (the gap may be its), a follower is given events only up to
the gap. A writer that began later cannot hold the gap's id (handed out before the event past it), and a gap with
no such writer is one whose transaction rolled back: it stays a gap for good, and is passed. The database says
which transactions are open and since when (`pg_stat_activity`), by its own clock; the events' own times would not
do, as some are stamped with an earlier moment than their insertion (an attempt's end, at the time the cloud gave).
A gap is held `MAX_HOLD_SECONDS` at most (a transaction left open for ever, an idle `psql` session, holds nothing).

SQLite writes one transaction at a time: there, ids are visible in order, and nothing is held back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from spotrun.state.db_clock import database_now
from spotrun.state.models import Event

# How far back from the newest id gaps are looked for: a gap further back is older than a transaction lasts.
TAIL_IDS = 1000

MAX_HOLD_SECONDS = 30.0
_KNOWN_GAPS_KEPT = 1000
_OLDEST_OPEN_WRITER = text(
    "SELECT extract(epoch FROM min(xact_start)) FROM pg_stat_activity WHERE datname = current_database() "
    "AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
)
# a gap (its database, its id, and the event past it: ids start again in a database emptied) -> when this process
# first saw it, by the database's clock
_first_seen: dict[tuple[str, int, int, float], float] = {}
_first_seen_lock = threading.Lock()


def first_unsettled_id(session: Session, after_id: int) -> int | None:
    """The smallest event id past `after_id` that is not visible while a later one is, when a transaction that may
    still commit it is open: events from it on are not to be handed to a follower yet. None when there is none."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    gaps = list(_gaps(session, after_id))
    if not gaps:
        return None
    now = database_now(session)
    oldest = session.scalar(_OLDEST_OPEN_WRITER)
    database = str(session.get_bind().url.database)
    for gap, past_id, past_at in gaps:
        seen = _seen_at((database, gap, past_id, past_at), now)
        if oldest is not None and float(oldest) <= seen and now - seen <= MAX_HOLD_SECONDS:
            return gap
    return None


def _seen_at(gap: tuple[str, int, int, float], now: float) -> float:
    with _first_seen_lock:
        if len(_first_seen) > _KNOWN_GAPS_KEPT:  # the oldest sightings go: their gaps are long settled
            for key, _ in sorted(_first_seen.items(), key=lambda item: item[1])[: _KNOWN_GAPS_KEPT // 2]:
                del _first_seen[key]
        return _first_seen.setdefault(gap, now)


def _gaps(session: Session, after_id: int) -> Iterator[tuple[int, int, float]]:
    """Each first id of a run missing past `after_id`, with the id and time of the first visible event past it."""
    newest = session.scalar(select(func.max(Event.id)))
    if newest is None or newest <= after_id:
        return
    start = max(after_id, newest - TAIL_IDS)
    expected = after_id + 1 if start == after_id else None  # where the window starts past the cursor, unknown
    for event_id, at in session.execute(select(Event.id, Event.at).where(Event.id > start).order_by(Event.id)):
        if expected is not None and event_id != expected:
            yield expected, event_id, at
        expected = event_id + 1
