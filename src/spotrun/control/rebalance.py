"""A spot instance the cloud says is at higher risk of being taken: move off it before it is.

EC2 sends a rebalance recommendation for a spot instance whose capacity pool is at elevated risk of interruption,
often well before any interruption notice (which then gives two minutes). The agent reports it (`warning` in the
agent API). With `spot.on_rebalance: move`, the job is placed again as if it were new, away from the instance's
zone, and if its policy picks spot in another zone the job moves there make-before-break (`moves`): the trainer
keeps running until the new instance is up, then checkpoints and stops; nothing is lost, and if the interruption
comes first the job recovers from it as from any other. On-demand or waiting are not worth a move that spot may
never need, so the job then stays. One try per attempt: a refused or failed standby is not tried again. A gang moves
whole, when any of its nodes is warned (`gang.py`, `gang_moves`).

Early warnings that are not about spot risk (a GCE live migration, an Azure freeze) are only recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from spotrun.control.placement import placement_context
from spotrun.policy import Launch
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job

if TYPE_CHECKING:
    from spotrun.control.controller import Controller

AT_RISK_WARNINGS = frozenset({"aws-imds/rebalance"})  # `Attempt.warning`s that say spot may soon be taken


def wants_move(spec: JobSpec, attempt: Attempt) -> bool:
    """Whether the running `attempt` had a warning of spot risk that its job moves off, and no notice yet."""
    return (
        spec.spot.on_rebalance == "move" and attempt.market == "spot" and attempt.warning in AT_RISK_WARNINGS
        and attempt.notice_at is None and attempt.state == "running"
    )


def move_off(controller: Controller, job: Job, attempt: Attempt, now: float) -> bool:
    """Start the single-node job's move away from `attempt`'s zone if it wants one and its policy finds spot
    elsewhere; whether a move was started."""
    spec = JobSpec.stored(job.spec)
    if not wants_move(spec, attempt) or controller.moves.backing_off(job.id, now):
        return False
    with controller.store.session() as session:
        decision = spot_elsewhere(controller, session, session.get(Job, job.id), spec, attempt, now)
    if decision is None:
        return False
    controller.moves.start(job.id, attempt.id, decision)
    return True


def spot_elsewhere(
    controller: Controller, session: Session, job: Job, spec: JobSpec, warned: Attempt, now: float,
) -> Launch | None:
    """Where the job would go if placed now away from `warned`'s zone, when that is spot; None when it would not
    go to spot, or `warned` was already given a standby (the one try per attempt)."""
    if session.scalar(select(exists().where(Attempt.standby_for == warned.id))):
        return None
    zones = [z for z in controller.job_zones(spec) if z != warned.zone]
    ctx = placement_context(
        session, job, spec, zones, now, market=controller.market_tries(session, job, spec, now),
        **controller.policy_prices(spec, zones),
    )
    if not ctx.zones:
        return None
    decision = controller.policy(spec).place(ctx)
    if not isinstance(decision, Launch) or decision.market != "spot" or decision.zone == warned.zone:
        return None
    return Launch(decision.zone, "spot", f"EC2 recommends rebalancing away from {warned.zone}; {decision.reason}")
