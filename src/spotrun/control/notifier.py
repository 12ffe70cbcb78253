"""Telling a job's owner what happened to it (spec `notify`), from the controller process, at least once.

Each tick, after its transactions have committed, `Notifier.run` reads the notifications due (`notifications`) of
the jobs this worker tells (`claims.notifying_jobs`: those it drives, and ended ones it claims while they have some)
and hands each job's to a thread, which posts them in order (`webhooks`) and moves the job's cursor in the store
(`Job.notified_event_id`) past each one told: a controller restarted in between tells that one again, and loses none.
The tick never waits for the network. A webhook that fails is tried again at later ticks, backing off, until
`give_up_after` seconds have passed since the post of the notification past the cursor first failed; then, or at once
when it refuses for good (a 4xx), the job's notifications due are given up with a `notification_failed` event. That
first failure is kept in the store beside the cursor (`Job.notify_failing_since`, cleared as the cursor moves), so
that the bound holds across restarts and across workers: a restarted controller, or the worker that took the job
over, tries once more at once and gives up if the bound is past. Only the back-off is this process's. The job itself
never waits for, nor depends on, its webhook.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from spotrun.control import webhooks
from spotrun.control.notifications import Backlog, Notification, backlog
from spotrun.control.states import LIVE, state_names
from spotrun.costs.ledger import bill
from spotrun.policy.default import backoff_delay
from spotrun.spec import JobSpec
from spotrun.spec.notify import webhook_origin
from spotrun.state import Job, Store, add_event, claims

log = logging.getLogger("spotrun.notifier")

RETRY_FIRST_SECONDS = 5.0  # the first wait after a failed post, doubling with each ...
RETRY_MAX_SECONDS = 120.0  # ... up to this
GIVE_UP_AFTER_SECONDS = 600.0  # from a job's first failed post
MAX_IN_FLIGHT = 8  # jobs whose notifications are being posted at once; the others wait for a later tick

Poster = Callable[[str, dict[str, Any]], webhooks.Outcome]


@dataclass
class _Failing:
    """A job whose oldest notification due could not be told yet: this process's tries of it, and when to try again
    (when it first failed is the store's: `Job.notify_failing_since`)."""

    tries: int = 0
    retry_at: float = 0.0


@dataclass(frozen=True)
class _Delivery:
    url: str
    backlog: Backlog
    news: tuple[webhooks.JobNews, ...]  # one per notification of the backlog


def _in_a_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="notify", daemon=True).start()


class Notifier:
    def __init__(
        self,
        store: Store,
        now: Callable[[], float],
        *,
        worker_id: str | None,
        claim_ttl: float,
        claim_now: Callable[[Session], float] | None = None,
        post: Poster = webhooks.post,
        start: Callable[[Callable[[], None]], None] = _in_a_thread,
        give_up_after: float = GIVE_UP_AFTER_SECONDS,
    ) -> None:
        """`now`: the controller's clock, which retries are timed by; `claim_now`: the time claims are judged in
        (the controller's `_claim_now`; default `now`); `start`: runs a delivery apart from the tick (a thread)."""
        self._store = store
        self._now = now
        self._worker_id = worker_id
        self._claim_ttl = claim_ttl
        self._claim_now = claim_now or (lambda session: now())
        self._post = post
        self._start = start
        self._give_up_after = give_up_after
        self._failing: dict[int, _Failing] = {}
        self._in_flight: set[int] = set()
        self._lock = threading.Lock()

    def run(self) -> None:
        """Hand each due job's notifications to a delivery; settle the cursors of jobs that have none to tell."""
        for delivery in self._due():
            if not delivery.news:
                if delivery.backlog.moves_cursor:
                    self._settle(delivery.backlog)
                continue
            with self._lock:
                if len(self._in_flight) >= MAX_IN_FLIGHT:
                    continue
                self._in_flight.add(delivery.backlog.job_id)
            self._start(lambda delivery=delivery: self._deliver(delivery))

    def _due(self) -> list[_Delivery]:
        now = self._now()
        with self._store.session() as session:
            ids = claims.notifying_jobs(session, self._worker_id, self._claim_now(session), self._claim_ttl,
                                        live_states=state_names(LIVE))
            self._forget_failures_but(ids)
            ready = [job_id for job_id in ids if self._ready(job_id, now)]
            jobs = session.scalars(select(Job).where(Job.id.in_(ready)).order_by(Job.id)).all() if ready else []
            return [self._delivery(session, job, now) for job in jobs]

    def _forget_failures_but(self, job_ids: list[int]) -> None:
        """The failures of jobs this worker no longer tells (another worker took them over) are forgotten."""
        with self._lock:
            for job_id in self._failing.keys() - set(job_ids) - self._in_flight:
                del self._failing[job_id]

    def _ready(self, job_id: int, now: float) -> bool:
        with self._lock:
            failing = self._failing.get(job_id)
            return job_id not in self._in_flight and (failing is None or now >= failing.retry_at)

    def _delivery(self, session: Session, job: Job, now: float) -> _Delivery:
        spec = JobSpec.stored(job.spec)
        due, notify = backlog(session, job, spec), spec.notify
        if notify is None or not due.notifications:  # (a cursor on a job without `notify`: settled, told nothing)
            return _Delivery("", due, ())
        job_bill = bill(job.placed_attempts, now)
        news = tuple(
            webhooks.JobNews(event_id=n.event_id, event=n.name, message=n.message, at=n.at, job_id=job.id,
                             job_name=job.name, owner=job.owner, state=job.state, cost=job_bill.cost,
                             unpriced_attempts=job_bill.unpriced_attempts)
            for n in due.notifications
        )
        return _Delivery(notify.webhook, due, news)

    def _deliver(self, delivery: _Delivery) -> None:
        """Post the job's notifications in order, its cursor moved past each one told; stop at the first not told."""
        job_id = delivery.backlog.job_id
        cursor = delivery.backlog.read_after
        try:
            for notification, news in zip(delivery.backlog.notifications, delivery.news, strict=True):
                outcome = self._post(delivery.url, webhooks.body(news, delivery.url))
                if not outcome.told:
                    self._not_told(delivery, notification, cursor, outcome)
                    return
                with self._lock:
                    self._failing.pop(job_id, None)
                self._advance(job_id, notification.event_id)
                cursor = notification.event_id
            self._settle(delivery.backlog)
        except Exception:  # the store away: the cursor says what is left, and a later tick tries again
            log.exception("job %s: delivering its notifications failed", job_id)
        finally:
            with self._lock:
                self._in_flight.discard(job_id)

    def _not_told(self, delivery: _Delivery, notification: Notification, cursor: int,
                  outcome: webhooks.Outcome) -> None:
        """`cursor`: the job's, which `notification` is the next past."""
        job_id, now = delivery.backlog.job_id, self._now()
        since = self._failing_since(job_id, cursor, now)
        failing, retrying = self._count_failure(job_id, outcome, since, now)
        where = webhook_origin(delivery.url)
        if retrying:
            log.warning("job %s: the webhook at %s did not take the %r notification (%s); trying again in %.0f s",
                        job_id, where, notification.name, outcome.reason, failing.retry_at - now)
            return
        left = [n for n in delivery.backlog.notifications if n.event_id >= notification.event_id]
        self._give_up(delivery.backlog, left, where, outcome, failing.tries, since, now)

    def _failing_since(self, job_id: int, cursor: int, now: float) -> float:
        """When a post of the job's notification past `cursor` first failed, as the store keeps it; recorded as `now`
        when this failure is the first. (`now` too when the cursor has moved meanwhile: another worker told it.)"""
        at_cursor = (Job.id == job_id, Job.notified_event_id == cursor)
        with self._store.session() as session:
            first = update(Job).where(*at_cursor, Job.notify_failing_since.is_(None)).values(notify_failing_since=now)
            session.execute(first, execution_options={"synchronize_session": False})
            since = session.scalar(select(Job.notify_failing_since).where(*at_cursor))
        return now if since is None else since

    def _count_failure(self, job_id: int, outcome: webhooks.Outcome, since: float,
                       now: float) -> tuple[_Failing, bool]:
        """This process's tries of the job's notification, this one counted, and whether to try again (at its
        `retry_at`): while it is worth another try and has been failing since `since` for less than the bound."""
        with self._lock:
            failing = self._failing.setdefault(job_id, _Failing())
            failing.tries += 1
            if outcome.retry and now - since < self._give_up_after:
                failing.retry_at = now + backoff_delay(failing.tries - 1, RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS)
                return failing, True
            del self._failing[job_id]
            return failing, False

    def _give_up(self, due: Backlog, left: list[Notification], where: str, outcome: webhooks.Outcome, tries: int,
                 since: float, now: float) -> None:
        names = ", ".join(n.name for n in left)
        tried = f"failing for {now - since:.0f} s; {tries} {'try' if tries == 1 else 'tries'} by this controller"
        message = (f"could not tell {names} to the webhook at {where} ({tried}, the last: {outcome.reason}); "
                   "not tried again")
        log.warning("job %s: %s", due.job_id, message)
        with self._store.session() as session:
            add_event(session, at=now, kind="notification_failed", job_id=due.job_id, message=message,
                      data={"events": [n.name for n in left], "event_ids": [n.event_id for n in left],
                            "reason": outcome.reason, "tries": tries, "failing_since": since})
            _move_cursor(session, due.job_id, due.settles_to, ended=due.ended)

    def _advance(self, job_id: int, event_id: int) -> None:
        with self._store.session() as session:
            _move_cursor(session, job_id, event_id, ended=False)

    def _settle(self, due: Backlog) -> None:
        with self._store.session() as session:
            _move_cursor(session, due.job_id, due.settles_to, ended=due.ended)


def _move_cursor(session: Session, job_id: int, to: int, *, ended: bool) -> None:
    """The job's notifications settled up to event `to`; for a job `ended` (its events read after its end), all of
    them: its cursor goes (NULL), and the job is no longer read for notifications. Only ever forward: a worker
    that stalled does not move back what another moved on. The next notification has not failed yet."""
    cursor = Job.notified_event_id
    behind = cursor <= to if ended else cursor < to
    moved = update(Job).where(Job.id == job_id, cursor.is_not(None), behind)
    session.execute(moved.values(notified_event_id=None if ended else to, notify_failing_since=None),
                    execution_options={"synchronize_session": False})
