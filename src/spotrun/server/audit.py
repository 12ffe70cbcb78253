"""The audit log: the events without a job that `spotrun.server.users` records for every change to users and tokens,
read back newest first, filtered and paged. `GET /api/v1/audit` and `spotrun audit` on the store both read it here.

An event is shown by its public fields only (who, to whom, which token by its prefix), never its stored data as is:
what the data may hold one day is not shown by mistake."""

from __future__ import annotations

from sqlalchemy import Select, func, or_, select

from spotrun.api_models import AuditEvent, AuditFilter, AuditPage
from spotrun.audit_kinds import AUDIT_KINDS
from spotrun.state import Event, Store


def audit_page(store: Store, chosen: AuditFilter) -> AuditPage:
    """The newest `chosen.limit` events that match, and where the next (older) page starts when more match."""
    with store.session() as session:
        rows = session.scalars(_matching(chosen).order_by(Event.id.desc()).limit(chosen.limit + 1)).all()
        events = [audit_event(row) for row in rows[: chosen.limit]]
    more = len(rows) > chosen.limit  # one more than asked for says whether older ones match
    return AuditPage(events=events, next_before_id=events[-1].id if more else None)


def _matching(chosen: AuditFilter) -> Select[tuple[Event]]:
    # Audit events are the only events without a job; their kinds are named as well, so that an event of another
    # kind stored without a job one day is not taken for a change to users.
    query = select(Event).where(Event.job_id.is_(None), Event.kind.in_(chosen.kind or AUDIT_KINDS))
    if chosen.user is not None:
        # The user acted on or the actor, in any case (names are told apart regardless of case): lower() on both
        # sides, so that a name SQLite's lower() and Python's fold differently (not ASCII) still matches itself.
        name = func.lower(chosen.user)
        query = query.where(or_(func.lower(Event.data["user"].as_string()) == name,
                                func.lower(Event.data["actor"].as_string()) == name))
    if chosen.since is not None:
        query = query.where(Event.at >= chosen.since)
    if chosen.before_id is not None:
        query = query.where(Event.id < chosen.before_id)
    return query


def audit_event(row: Event) -> AuditEvent:
    data = row.data or {}
    revoked = data.get("revoked_tokens")
    return AuditEvent(
        id=row.id, at=row.at, kind=row.kind, actor=str(data.get("actor", "")), user=str(data.get("user", "")),
        token_prefix=data.get("token_prefix"), message=row.message,
        revoked_tokens=[str(prefix) for prefix in revoked] if isinstance(revoked, list) else [],
    )
