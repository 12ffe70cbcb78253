"""Make-before-break moves of a running multi-node job: a standby gang.

When a gang's policy says "run there instead" (spot back for a gang on on-demand, on-demand near a deadline, spot in
another zone), a standby is launched for every node not already there (`Attempt.standby_for`: the node it takes
over from; in the gang's own zone only the nodes on the other market move) while the generation keeps training. A
standby's agent reports in and waits, as every gang agent does until it is a member of a generation. Only once
every standby is up is the generation stopped: each rank commits one checkpoint, the nodes replaced end "migrated",
and the standbys, now the gang's nodes, start the next generation from that checkpoint with the others.

While the standbys gather, any of them that is refused, lost or taken back ends them all (one try of the move, the
gang untouched; the next move waits as a single node's does). Once the generation has stopped, whether for the move
or because a node went meanwhile, the move is committed: the nodes replaced still up are asked to stop too, a standby
lost after that only leaves its rank empty, and the gang fills it as it fills any lost node's.

Every step reads the store afresh and records before it acts, as the rest of the controller does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotrun.control import records
from spotrun.control.gang_records import latest_generation, open_attempts_by_rank, stop_generation
from spotrun.control.observe import Verdict, judge_attempt
from spotrun.policy import Launch
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job, add_event

if TYPE_CHECKING:
    from spotrun.control.controller import Controller


class GangMoveDriver:
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    def start(self, job_id: int, decision: Launch, node_ids: list[int]) -> None:
        """Record one standby for each of these nodes, taking over the node of its rank, then launch them."""
        now = self.c.clock.now()
        with self.c.store.session() as session:
            job = session.get(Job, job_id)
            spec = JobSpec.stored(job.spec)
            standby_ids = []
            for node_id in node_ids:
                node = session.get(Attempt, node_id)
                standby = self.c.record_launch_intent(session, job, spec, decision, now, node_rank=node.node_rank)
                standby.standby_for = node.id
                standby_ids.append(standby.id)
            which = "every node" if len(node_ids) == spec.resources.nodes else f"{len(node_ids)} of the nodes"
            add_event(
                session, at=now, kind="move_started", job_id=job_id,
                message=f"launching {which} again on {decision.market} in {decision.zone} while the gang keeps "
                f"running ({decision.reason})",
            )
        for standby_id in standby_ids:
            if not self._launch(job_id, standby_id):
                return

    def drive(self, job_id: int) -> None:
        """One step for the standbys of a move under way, if any."""
        with self.c.store.session() as session:
            job = session.get(Job, job_id)
            standbys = records.held_standbys(open_attempts_by_rank(session, job_id))
            generation = latest_generation(session, job_id)
            committed = generation is None or generation.state != "running"
            over = job.cancel_requested or job.failure_reason or (generation and generation.end_reason == "succeeded")
        if over:
            # the gang's end gives every standby back with the nodes; one whose end was half done (a tick that died
            # in it) is finished first, or the gang's end would wait on it forever
            for standby in standbys:
                if standby.state == "ending":
                    self.c.finish_attempt(standby.id, _nothing_more)
            return
        if not standbys:
            return
        for standby in standbys:
            if standby.state == "ending":  # its end was recorded in a tick that died before it gave the others back
                self.c.finish_attempt(standby.id, _nothing_more)
                if self._abandon_unless_committed(job_id, f"the standby of node {standby.node_rank} ended", standby.id):
                    return
            elif standby.instance_id is None:
                if not self._launch(job_id, standby.id):
                    return
            elif not self._watch(job, standby):
                return
        if committed:
            self._stop_old_nodes(job_id, "the gang moves to the nodes standing by")
        else:
            self._take_over_when_ready(job_id)

    def _launch(self, job_id: int, standby_id: int) -> bool:
        """Launch one standby; False when it was refused and the move was given up with it."""
        refusal = self.c.try_launch(standby_id)
        if refusal is None:
            return True
        self.c.record_launch_refusal(standby_id, refusal, back_off_job=False)
        return not self._abandon_unless_committed(job_id, f"a standby could not be launched ({refusal})", standby_id)

    def _watch(self, job: Job, standby: Attempt) -> bool:
        """Judge one standby; False when it ended and the move was given up with it."""
        now = self.c.clock.now()
        verdict = judge_attempt(
            job, standby, self.c.describe(standby), now, self.c.settings, self.c.watched_since(standby))
        if verdict is None or verdict.end_reason is None:
            return True
        what = f"the standby of node {standby.node_rank}"
        self.c.begin_end(standby.id, Verdict(verdict.end_reason, f"{what}: {verdict.message}"))
        self.c.finish_attempt(standby.id, _nothing_more)
        # once the gang has stopped, its rank is only left empty: the gang fills it when the old nodes are gone
        return not self._abandon_unless_committed(job.id, f"{what} {verdict.end_reason}", standby.id)

    def _abandon_unless_committed(self, job_id: int, why: str, cause_id: int) -> bool:
        """While the generation still runs, end every standby left: the gang stays where it is. True if abandoned.
        `cause_id`: the standby whose end gives the move up; the event names it, so that a refused one holds back
        only the moves it concerns, as a single node's does (`MoveDriver.backing_off`)."""
        now = self.c.clock.now()
        with self.c.store.session() as session:
            generation = latest_generation(session, job_id)
            if generation is not None and generation.state != "running":
                return False
            left = records.held_standbys(open_attempts_by_rank(session, job_id))
            add_event(
                session, at=now, kind="move_abandoned", job_id=job_id, attempt_id=cause_id,
                message=f"{why}; giving back the {len(left)} other standbys, the gang stays where it runs",
            )
            left_ids = [a.id for a in left]
        for standby_id in left_ids:
            self.c.begin_end(standby_id, Verdict("released", "the gang's move was given up"))
            self.c.finish_attempt(standby_id, _nothing_more)
        return True

    def _take_over_when_ready(self, job_id: int) -> None:
        """Once every standby has reported in, stop the generation: every rank commits a checkpoint."""
        now = self.c.clock.now()
        with self.c.store.session() as session:
            standbys = records.held_standbys(open_attempts_by_rank(session, job_id))
            if not all(a.agent_started_at is not None and a.address and a.rendezvous_port for a in standbys):
                return
            where = f"{standbys[0].market} in {standbys[0].zone}"
            stop_generation(session, latest_generation(session, job_id), f"moving the gang to {where}", now)
        self._stop_old_nodes(job_id, f"the nodes on {where} are up")

    def _stop_old_nodes(self, job_id: int, reason: str) -> None:
        """Ask every node a standby takes over from, still running, to have its trainer checkpoint and stop."""
        now = self.c.clock.now()
        with self.c.store.session() as session:
            attempts = open_attempts_by_rank(session, job_id)
            replaced = {a.standby_for for a in records.held_standbys(attempts)}
            for node in attempts:
                if node.id in replaced and node.state == "running":
                    records.ask_to_stop(session, node, reason, now)


def _nothing_more(session, standby: Attempt, now: float) -> None:
    """A standby's end moves nothing on: the gang runs, or is already on its way to the standbys left."""
