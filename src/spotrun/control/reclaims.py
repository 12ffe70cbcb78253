"""Interrupted spot instances left for the cloud to take back, when that makes them free.

EC2 charges nothing for a spot instance it interrupts within the instance's first hour, and charges the seconds used
for one the user terminates, notice or not (`costs.billing`). So once the trainer of such an instance has saved and
stopped, the job moves on to its next attempt at once, but its instance is not terminated: it is marked
`awaiting_reclaim` with a time to release it: the reclaim time the notice stated (or, where it stated none, the
rule's `notice_lead` after the notice) and a margin more. Each tick settles
the instances waiting: one the cloud took back is billed by the cloud's rule (free in the first hour); one still
there at its release time (the notice was wrong, or the cloud is late) is terminated and billed its seconds. The
most this can cost is the seconds to the release time, at spot's price, of an instance that was not taken back.

Crash safety: the mark and the release time are in the store, so a controller that restarts settles what its
predecessor left; the orphan sweep leaves instances awaiting reclaim to this module; settling claims the instance's
row by compare-and-set, so two controller workers never bill it twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from spotrun.costs.billing import BillingRule, stated_end
from spotrun.state import Attempt, Instance, add_event

if TYPE_CHECKING:
    from spotrun.control.controller import Controller

log = logging.getLogger(__name__)

AWAITING = "awaiting_reclaim"
RELEASE_MARGIN = 60.0  # seconds past the notice's reclaim time before spotrun terminates the instance itself
# The sources whose notice is the cloud announcing it will take the instance (its metadata service), by the agent's
# names; a SIGTERM or the controller's own stop says nothing of what the cloud will do.
CLOUD_NOTICE_SOURCES = frozenset({"aws-imds", "gcp-metadata", "azure-scheduled-events", "local-metadata"})


def release_time(attempt: Attempt, rule: BillingRule, now: float) -> float | None:
    """When to terminate `attempt`'s instance if the cloud has not taken it, or None to terminate it now: only an
    instance the cloud announced it will take back, inside the window where that costs nothing, is left to it (also
    one stopping to move when the cloud's notice came: it ends "migrated")."""
    if attempt.end_reason not in ("preempted", "migrated") or attempt.notice_source not in CLOUD_NOTICE_SOURCES:
        return None
    if attempt.started_at is None or attempt.notice_at is None:
        return None
    reclaim_at = rule.expected_reclaim(attempt.notice_at, attempt.reclaim_at)
    if not rule.reclaim_would_be_free(market=attempt.market, started_at=attempt.started_at, reclaim_at=reclaim_at):
        return None
    release_at = reclaim_at + RELEASE_MARGIN
    return release_at if now < release_at else None


def leave_to_cloud(session, attempt: Attempt, release_at: float, now: float) -> None:
    instance = session.get(Instance, attempt.instance_id)
    if instance is not None:
        instance.state = AWAITING
        instance.release_at = release_at
    add_event(
        session, at=now, kind="instance_left_to_cloud", job_id=attempt.job_id, attempt_id=attempt.id,
        message=f"attempt {attempt.number}: leaving {attempt.instance_id} for the cloud to take back (free in its "
        f"first hour); terminating it at {release_at - now:.0f} s from now if it has not",
    )


def settle_awaiting(controller: Controller) -> None:
    """Bill each instance the cloud took back, and terminate those past their release time."""
    now = controller.clock.now()
    with controller.store.session() as session:
        waiting = awaiting_instances(session)
    for instance_id, provider_name, release_at in waiting:
        try:
            _settle(controller, instance_id, provider_name, release_at, now)
        except Exception:  # one cloud's error must not stop the others; the next tick tries again
            log.exception("settling instance %s left to the cloud failed", instance_id)


def _settle(controller: Controller, instance_id: str, provider_name: str, release_at: float | None, now: float) -> None:
    info = controller.describe_instance(provider_name, instance_id)
    ended_now = False  # the cloud showed it up, and spotrun terminates it now
    if info is None or info.state != "terminated":
        if release_at is not None and now < release_at:
            return
        ended_now = info is not None and info.state in ("pending", "running")
        controller.provider(provider_name).terminate(instance_id)
        info = controller.describe_instance(provider_name, instance_id)
    with controller.store.session() as session:
        claimed = session.execute(
            update(Instance).where(Instance.id == instance_id, Instance.state == AWAITING).values(state="terminated")
        ).rowcount
        if not claimed:  # another worker settled it
            return
        instance = session.get(Instance, instance_id)
        attempt = session.get(Attempt, instance.attempt_id)
        reclaimed = bool(info and info.state == "terminated" and info.reclaimed)
        told = stated_end(attempt.started_at, info.terminated_at, now) if info and info.terminated_at else None
        gone_at = told or (now if ended_now else _gone_by(release_at, now))
        instance.terminated_at, instance.reclaimed = gone_at, reclaimed
        _bill(session, attempt, controller.billing_rule(attempt.provider), gone_at, reclaimed)


def _gone_by(release_at: float | None, now: float) -> float:
    """When an instance the cloud gives no time for was gone: by its release time at the latest, as spotrun would have
    terminated it then. A controller down for longer (EC2 no longer lists an instance an hour after it went) would
    otherwise charge it through the outage; the release time is the most it can cost."""
    return min(now, release_at) if release_at is not None else now


def _bill(session, attempt: Attempt, rule: BillingRule, gone_at: float, reclaimed: bool) -> None:
    held = max(gone_at - (attempt.started_at or gone_at), 0.0)
    attempt.billed_seconds = held
    attempt.charged_seconds = rule.charged_seconds(held, market=attempt.market, reclaimed=reclaimed)
    how = "the cloud took it back" if reclaimed else "the cloud did not take it back; terminated"
    add_event(
        session, at=gone_at, kind="instance_settled", job_id=attempt.job_id, attempt_id=attempt.id,
        message=f"attempt {attempt.number}: {attempt.instance_id} gone ({how}) after {held:.0f} s; "
        f"{attempt.charged_seconds:.0f} s charged",
        data={"reclaimed": reclaimed, "billed_seconds": held, "charged_seconds": attempt.charged_seconds},
    )


_IS_AWAITING = Instance.state == AWAITING  # the partial index ix_instances_awaiting_reclaim holds just these


def awaiting_instances(session) -> list:
    """(id, provider, release_at) of each instance left for the cloud to take back."""
    return session.execute(select(Instance.id, Instance.provider, Instance.release_at).where(_IS_AWAITING)).all()


def awaiting_release(session, attempt_ids: list[int]) -> dict[int, float | None]:
    """For each of these attempts whose instance is left for the cloud to take back: when spotrun will terminate it
    if the cloud has not. Until then the attempt's charge is provisional (`server.views`)."""
    if not attempt_ids:
        return {}
    rows = session.execute(
        select(Instance.attempt_id, Instance.release_at).where(_IS_AWAITING, Instance.attempt_id.in_(attempt_ids))
    )
    return {row.attempt_id: row.release_at for row in rows}


def awaiting_ids(session) -> set[str]:
    return {row.id for row in awaiting_instances(session)}
