"""Where a reader that follows events by id may safely move its cursor to.

PostgreSQL hands an event its id when it is inserted, not when its transaction commits: a transaction holding id 5
can commit after another that holds id 6. A follower that read 6 and moved its cursor past it (`?after=6`) would
never see 5. So a follower is given events only up to the first id that is missing from the sequence while a later
one is visible: the missing one may still be committed. A gap stays a gap for good when its transaction rolled back;
it is taken as such once the event after it is `SETTLE_SECONDS` old, longer than any of spotrun's transactions last.

SQLite writes one transaction at a time: there, ids are visible in order, and nothing is held back.
"""

from __future__ import annotations

import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from spotrun.state.models import Event

SETTLE_SECONDS = 15.0
# How far back from the newest id gaps are looked for: more events than this in SETTLE_SECONDS would be needed to
# hide an unsettled one beyond it.
TAIL_IDS = 2000


def first_unsettled_id(session: Session, after_id: int, now: float | None = None) -> int | None:
    """The smallest event id past `after_id` that is not visible yet while a later one is, and recently: events
    from it on are not to be handed to a follower yet. None when there is no such id."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    now = time.time() if now is None else now
    newest = session.scalar(select(func.max(Event.id)))
    if newest is None or newest <= after_id:
        return None
    start = max(after_id, newest - TAIL_IDS)
    expected = after_id + 1 if start == after_id else None  # where the window starts past the cursor, unknown
    for event_id, at in session.execute(select(Event.id, Event.at).where(Event.id > start).order_by(Event.id)):
        if expected is not None and event_id != expected and 0 <= now - at < SETTLE_SECONDS:
            return expected
        expected = event_id + 1
    return None
