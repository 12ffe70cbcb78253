"""Make-before-break moves of a running single-node job.

When a job's policy says "run there instead", the instance there is launched while the job keeps running where it
is: a refused launch costs one try and nothing else. The new attempt (a standby, `Attempt.standby_for`) boots and
its agent reports in, then holds, restoring and running nothing. Only then is the running attempt asked to
checkpoint and stop; once it has ended, the standby is the job's attempt, its agent is released (the heartbeat's
answer says so) and it restores the checkpoint just written. A standby that dies first is ended and the job stays
where it runs; a job that ends (succeeds, fails, is cancelled) while a standby waits ends the standby too.

Crash safety is the controller's as everywhere: the standby's row and client token are written before its launch,
its end is written as "ending" before its instance is terminated, and every step is repeated by the next tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import or_, select

from spotrun.control import records
from spotrun.control.observe import REFUSED_LAUNCHES, Verdict, judge_attempt
from spotrun.control.states import TERMINAL, JobState, is_terminal
from spotrun.policy import Launch
from spotrun.policy.default import backoff_delay, fell_back_to_on_demand
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Event, Job, add_event

if TYPE_CHECKING:
    from spotrun.control.controller import Controller

# A standby that held an instance and ended before taking over (it did not boot, was taken back, failed) costs money:
# the job's next move waits boot_timeout after the first such end in this window, doubling, at most the cap.
ABANDONED_MOVES_WINDOW = 3600.0
ABANDONED_MOVES_MAX_WAIT = 3600.0
# A standby refused (or whose launch kept failing) costs nothing, but a policy asked every reconsider_every is not told
# of every refusal (a quota, a launch no retry mends) and would try the same again each time: the next move to that
# zone and market waits reconsider_every after the first such refusal in the window, doubling, at most the cap. Only
# that zone and market: even a launch no retry mends may be the zone's (a subnet missing there), and a refused try
# costs nothing. Single-node jobs and gangs alike (`refused_lately`); a refused standby is no abandoned move
# (`backing_off`).
MOVE_REFUSALS = REFUSED_LAUNCHES | {"launch_error"}


def quickest_boot(attempts: Iterable[Attempt]) -> float | None:
    """The shortest time one of the job's instances took from its launch to its agent reporting in (None: none has):
    a move keeps the instance held running at least that long, as it waits for the new one's agent."""
    return min((a.agent_started_at - a.created_at for a in attempts if a.agent_started_at is not None), default=None)


def may_move(spec: JobSpec, market: str) -> bool:
    """Whether a running job's policy may want it elsewhere: with a deadline, or on on-demand while it would
    rather run on spot. A job on spot without a deadline stays where it is until spot is taken away."""
    return spec.spot.deadline is not None or fell_back_to_on_demand(market, spec.spot.use_spot, spec.spot.fallback)


def _waiting_after(ends: list[float], first_wait: float, now: float) -> bool:
    """Whether a move is still held back by these ends in the window (oldest first): `first_wait` after the last,
    doubling with each, at most ABANDONED_MOVES_MAX_WAIT."""
    if not ends:
        return False
    return now < ends[-1] + backoff_delay(len(ends) - 1, first_wait, ABANDONED_MOVES_MAX_WAIT)


class MoveDriver:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def start(self, job_id: int, current_id: int, decision: Launch) -> None:
        """Record the standby attempt that will take over from `current_id`, then launch it."""
        c = self.controller
        now = c.clock.now()
        with c.store.session() as session:
            job = session.get(Job, job_id)
            current = session.get(Attempt, current_id)
            standby = c.record_launch_intent(session, job, JobSpec.stored(job.spec), decision, now)
            standby.standby_for = current.id
            add_event(
                session, at=now, kind="move_started", job_id=job.id, attempt_id=standby.id,
                message=f"attempt {standby.number}: launching {decision.market} in {decision.zone} while attempt "
                f"{current.number} keeps running ({decision.reason})",
            )
            standby_id = standby.id
        self._launch(standby_id)

    def backing_off(self, job_id: int, now: float) -> bool:
        """Whether the job's last moves were abandoned too recently for another (see ABANDONED_MOVES_WINDOW); not
        those given up for a refused standby (a gang's, or one Azure refused after accepting it): a refusal holds
        back only the moves it concerns (`refused_lately`)."""
        with self.controller.store.session() as session:
            abandoned = session.scalars(
                select(Event.at)
                .outerjoin(Attempt, Attempt.id == Event.attempt_id)
                .where(
                    Event.job_id == job_id, Event.kind == "move_abandoned", Event.at >= now - ABANDONED_MOVES_WINDOW,
                    or_(Event.attempt_id.is_(None), Attempt.end_reason.is_(None),
                        Attempt.end_reason.not_in(MOVE_REFUSALS)),
                )
                .order_by(Event.at)
            ).all()
        return _waiting_after(abandoned, self.controller.settings.boot_timeout, now)

    def refused_lately(self, job_id: int, zone: str, market: str, now: float) -> bool:
        """Whether the job's moves to `zone` and `market` were refused too recently for another there (see
        MOVE_REFUSALS)."""
        with self.controller.store.session() as session:
            refused = session.scalars(
                select(Attempt.ended_at)
                .where(
                    Attempt.job_id == job_id, Attempt.standby_for.is_not(None), Attempt.zone == zone,
                    Attempt.market == market, Attempt.end_reason.in_(MOVE_REFUSALS),
                    Attempt.ended_at >= now - ABANDONED_MOVES_WINDOW,
                )
                .order_by(Attempt.ended_at)
            ).all()
        return _waiting_after(refused, self.controller.settings.reconsider_every, now)

    def drive(self, standby_id: int) -> None:
        """One step for a standby: launch it, watch it, and once its agent is waiting, ask the attempt it replaces
        to checkpoint and stop."""
        c = self.controller
        with c.store.session() as session:
            standby = session.get(Attempt, standby_id)
            if standby.ended_at is not None:
                return
            held = records.is_held(session, standby)
            job = standby.job
            current = session.get(Attempt, standby.standby_for)
        if standby.state == "ending":  # its own end, or the job's (after_predecessor_end)
            c.finish_attempt(standby.id, self._after_standby_end)
        elif not held:
            return  # its predecessor has ended: it is the job's attempt now
        elif standby.instance_id is None:
            self._launch(standby.id)
        else:
            self._watch(job, current, standby)

    def _launch(self, standby_id: int) -> None:
        refusal = self.controller.try_launch(standby_id)
        if refusal is not None:  # the job stays where it runs; its policy may try again at its next reconsider
            self.controller.record_launch_refusal(standby_id, refusal, back_off_job=False)

    def _watch(self, job: Job, current: Attempt, standby: Attempt) -> None:
        c = self.controller
        info = c.describe(standby)
        verdict = judge_attempt(job, standby, info, c.clock.now(), c.settings, c.watched_since(standby))
        if verdict is not None and verdict.end_reason is not None:
            c.begin_end(standby.id, Verdict(verdict.end_reason, f"standby {verdict.message}"))
            c.finish_attempt(standby.id, self._after_standby_end)
        elif standby.agent_started_at is not None and current.state == "running" and current.notice_at is None:
            c.request_move(current.id, f"attempt {standby.number} is up ({standby.market} in {standby.zone})")

    def _after_standby_end(self, session, standby: Attempt, now: float) -> None:
        current = session.get(Attempt, standby.standby_for)
        if current is None or current.ended_at is not None:
            return
        stays = "the job stays on it"
        if current.state == "draining":
            stays = "it was asked to stop and the job will be placed again"
        add_event(
            session, at=now, kind="move_abandoned", job_id=standby.job_id, attempt_id=standby.id,
            message=f"attempt {standby.number} ended ({standby.end_reason}) before it took over from attempt "
            f"{current.number}; {stays}",
        )

    def after_predecessor_end(self, session, ended: Attempt, now: float) -> None:
        """In the transaction that ended `ended` (and moved its job on): its standby, if any, takes over, or is
        marked to end when the job itself has ended."""
        standby = session.scalars(
            select(Attempt).where(
                Attempt.job_id == ended.job_id, Attempt.standby_for == ended.id, Attempt.ended_at.is_(None)
            )
        ).first()
        if standby is None:
            return
        job = ended.job
        if is_terminal(job.state):
            standby.state, standby.end_reason = "ending", "cancelled"
            add_event(
                session, at=now, kind="attempt_ending", job_id=job.id, attempt_id=standby.id,
                message=f"attempt {standby.number}: not needed, the job is {job.state}",
            )
            return
        if job.state == JobState.PREEMPTED:
            records.transition(session, job, JobState.PROVISIONING, now, f"attempt {standby.number} was already launched")
        add_event(
            session, at=now, kind="move_taken_over", job_id=job.id, attempt_id=standby.id,
            message=f"attempt {standby.number} ({standby.market} in {standby.zone}) takes over from attempt "
            f"{ended.number} ({ended.end_reason})",
        )

    def end_leftovers(self) -> None:
        """Open attempts of jobs that have ended (a crash between the job's end and its standby's): end them,
        terminating their instances. The orphan sweep calls this."""
        c = self.controller
        with c.store.session() as session:
            leftovers = session.execute(
                select(Attempt.id, Attempt.state).join(Job).where(
                    Attempt.ended_at.is_(None), Job.state.in_([s.value for s in TERMINAL])
                )
            ).all()
        for attempt_id, state in leftovers:  # no worker holds an ended job's claim: unfenced, first come ends it
            if state != "ending":
                c.begin_end(attempt_id, Verdict("cancelled", "not needed: the job has ended"), fenced=False)
            c.finish_attempt(attempt_id, lambda session, attempt, now: None, fenced=False)
