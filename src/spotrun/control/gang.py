"""Multi-node jobs (resources.nodes = N > 1): a gang of N node slots, each filled by one attempt (one instance).

The ranks run in *generations*: a generation starts only once every slot holds an instance whose agent has
reported in (with its address and a free port), node 0's address becoming the master's; it stops as soon as any
member is lost or fails, and ends once every member is accounted for (its command exited, or its attempt ended).
Then only the lost slots are launched again, in the survivors' zone, and the next generation starts every rank
from the newest checkpoint all of them committed (the SDK's distributed commit). A new node 0 means a new master
address. A launch refused for any slot, or a gang still incomplete after `distributed.gang_timeout`, gives back
every instance the gang holds, and the whole gang is placed again by the policy.

A running gang is put to its policy every `reconsider_every` seconds, as a single node is, when it has a deadline or
fell back to on-demand; when the policy wants it elsewhere, a standby gang is launched there and takes over once
every one of its nodes is up (spotrun.control.gang_moves). When the policy wants it to wait, every rank is asked to
stop, the ranks commit one checkpoint, and the whole gang is placed again.

Every step reads the store afresh and records before it acts, as the single-node controller does, so a tick
killed anywhere is repeated safely.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from spotrun.control import rebalance, records, start_failures
from spotrun.control.gang_moves import GangMoveDriver
from spotrun.control.gang_records import latest_generation, open_attempts_by_rank, split_standbys, stop_generation
from spotrun.control.moves import may_move
from spotrun.control.observe import DRAIN_MARGIN, Verdict, judge_attempt
from spotrun.control.placement import placement_context
from spotrun.control.states import JobState
from spotrun.control.wording import times
from spotrun.policy import GiveUp, Launch, RunningDecision, Wait
from spotrun.providers import ProviderError
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Generation, Job, add_event

if TYPE_CHECKING:
    from spotrun.control.controller import Controller

log = logging.getLogger("spotrun.controller.gang")

PREEMPTED_EXIT_CODE = 75  # the SDK's "saved after a stop request, resume me" (spotrun.sdk is not imported here)


def assignment(session, attempt: Attempt) -> dict[str, Any] | None:
    """What an agent of a multi-node job is told in each heartbeat's answer: the generation it belongs to (run
    the command with these rendezvous settings while "running"; stop it once "stopping" or "ended"), or None
    while it waits for the gang to be complete."""
    generation = latest_generation(session, attempt.job_id)
    if generation is None or generation.members.get(str(attempt.node_rank)) != attempt.id:
        return None
    order = {
        "generation": generation.number,
        "state": generation.state,
        "master_addr": generation.master_addr,
        "master_port": generation.master_port,
        "node_rank": attempt.node_rank,
        "nnodes": len(generation.members),
    }
    if generation.state == "stopping" and (deadline := notice_deadline(session, generation)) is not None:
        order["stop_by"] = deadline  # the ranks have until the cloud takes the noticed node, not just notice_grace
    return order


def _every_rank_finished(session, job_id: int) -> bool:
    """Whether every member of the job's newest generation reported exit code 0 for it."""
    generation = latest_generation(session, job_id)
    return generation is not None and all(
        _exited(session.get(Attempt, attempt_id), generation.number) == 0 for attempt_id in generation.members.values()
    )


def _exited(attempt: Attempt, generation: int) -> int | None:
    """The exit code the node reported for `generation`; None when it has not reported one."""
    return attempt.generation_exit_code if (attempt.generation_done or 0) >= generation else None


def notice_deadline(session, generation: Generation) -> float | None:
    """The soonest time a cloud said it takes a member's instance (its notice's deadline), for members not gone."""
    deadlines = [
        attempt.reclaim_at for attempt_id in generation.members.values()
        if (attempt := session.get(Attempt, attempt_id)) is not None and attempt.ended_at is None
        and attempt.notice_at is not None and attempt.reclaim_at is not None
    ]
    return min(deadlines, default=None)


def _ranks_stop_by(session, job_id: int) -> float | None:
    """The time the ranks of the job's stopping generation were told they have (`assignment`), if it named one: a
    node stopping to move is not ended before it, though its own grace is shorter."""
    generation = latest_generation(session, job_id)
    return notice_deadline(session, generation) if generation is not None and generation.state == "stopping" else None


def generation_end_reason(gone: list[int], exit_codes: dict[int, int | None]) -> str:
    """How a generation whose every member is accounted for ended."""
    if gone:
        return "interrupted"
    codes = set(exit_codes.values())
    if codes == {0}:
        return "succeeded"
    if codes <= {0, PREEMPTED_EXIT_CODE}:
        return "stopped"
    return "failed"


class GangDriver:
    """One tick for one multi-node job; the controller's helpers launch, judge and end the single attempts."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self._moves = GangMoveDriver(controller)

    def drive(self, job_id: int) -> None:
        self._finish_ending_nodes(job_id)
        self._launch_pending_nodes(job_id)
        self._watch_nodes(job_id)
        self._steer_generation(job_id)
        self._moves.drive(job_id)
        self._reconsider(job_id)
        self._advance(job_id)
        self._launch_pending_nodes(job_id)  # what _advance placed just now

    # ---- the nodes one by one ----------------------------------------------------------------------------

    def _finish_ending_nodes(self, job_id: int) -> None:
        with self.c.store.session() as session:
            ending = [a.id for a in _nodes(session, job_id) if a.state == "ending"]
        for attempt_id in ending:
            self.c.finish_attempt(attempt_id, self._after_node)

    def _launch_pending_nodes(self, job_id: int) -> None:
        now = self.c.clock.now()
        with self.c.store.session() as session:
            if self._over(session.get(Job, job_id), now):  # `_advance` ends every node, those not launched too
                return
            pending = [a.id for a in _nodes(session, job_id) if a.instance_id is None]
        for attempt_id in pending:
            refusal = self.c.try_launch(attempt_id)
            if refusal is not None:
                self._give_back_after_refusal(job_id, attempt_id, refusal)
                return

    def _give_back_after_refusal(self, job_id: int, refused_id: int, refusal: ProviderError) -> None:
        """One slot cannot be had: give back the rest, and let the policy place the whole gang again."""
        with self.c.store.session() as session:
            refused = session.get(Attempt, refused_id)
            others = [a.id for a in open_attempts_by_rank(session, job_id) if a.id != refused_id]  # standbys too
            message = f"node {refused.node_rank} could not be launched ({refusal}); giving back the gang's other nodes"
        self._end_nodes(others, Verdict("released", message))
        self.c.record_launch_refusal(refused_id, refusal, back_off_job=True)

    def _watch_nodes(self, job_id: int) -> None:
        now = self.c.clock.now()
        with self.c.store.session() as session:
            job = session.get(Job, job_id)
            placed = [a for a in _nodes(session, job_id) if a.instance_id is not None and a.state != "ending"]
            stop_by = _ranks_stop_by(session, job_id)
        for attempt in placed:
            info = self.c.describe(attempt)
            verdict = judge_attempt(job, attempt, info, now, self.c.settings, self.c.watched_since(attempt), stop_by)
            if verdict is not None and verdict.end_reason is not None:
                self._end_nodes([attempt.id], verdict)
            elif info is not None:  # not while the instance may be gone (`Controller._watch`)
                self.c.follow_spot_price(job, attempt, now)

    def _end_nodes(self, attempt_ids: list[int], verdict: Verdict) -> None:
        # every end recorded before any instance is terminated: a tick that dies after the first finishes the others
        # (`_finish_ending_nodes`), where it would have filled their gang again, a replacement launched to be given back
        for attempt_id in attempt_ids:
            self.c.begin_end(attempt_id, verdict)
        for attempt_id in attempt_ids:
            self.c.finish_attempt(attempt_id, self._after_node)

    def _after_node(self, session, attempt: Attempt, now: float) -> None:
        """A node's attempt has ended: a preemption or a loss during a run sends the job back to placing."""
        job = attempt.job
        what = f"node {attempt.node_rank} ({attempt.instance_id})"
        if attempt.end_reason == "preempted":
            job.preemptions += 1
            finished = _every_rank_finished(session, job.id)
            message = f"{what} preempted (preemption {job.preemptions}); " + (
                "every rank had finished" if finished else "replacing it")
            if job.state == JobState.PREEMPTED or finished:
                add_event(session, at=now, kind="node_preempted", job_id=job.id, attempt_id=attempt.id, message=message)
            else:
                records.transition(session, job, JobState.PREEMPTED, now, message)
        elif attempt.end_reason == "lost" and job.state == JobState.RUNNING:
            records.transition(session, job, JobState.PROVISIONING, now, f"{what} lost; replacing it")
        elif attempt.end_reason == "migrated" and job.state == JobState.RUNNING:
            records.transition(session, job, JobState.PROVISIONING, now, f"{what} stopped to move the gang")
        elif attempt.end_reason == "failed":  # the agent itself failed there (e.g. the setup command)
            spec = JobSpec.stored(job.spec)
            job.restarts_on_error += 1
            if job.restarts_on_error > spec.max_restarts_on_error:
                job.failure_reason = start_failures.job_failure_reason(
                    session, attempt, job.restarts_on_error, spec.max_restarts_on_error, what
                ) or f"{what} failed {times(job.restarts_on_error)} (max_restarts_on_error={spec.max_restarts_on_error})"

    # ---- the generation ----------------------------------------------------------------------------------

    def _steer_generation(self, job_id: int) -> None:
        now = self.c.clock.now()
        overdue: list[tuple[int, bool]] = []  # (attempt, whether its node had a notice)
        with self.c.store.session() as session:
            generation = latest_generation(session, job_id)
            if generation is None or generation.state == "ended":
                return
            members = {int(rank): session.get(Attempt, attempt_id) for rank, attempt_id in generation.members.items()}
            if _every_rank_finished(session, job_id):
                # every rank finished; a node taken afterwards (a notice during the final save) changes nothing
                self._end_generation(session, generation, "succeeded", now)
                return
            gone = sorted(r for r, a in members.items() if a.ended_at is not None or a.state == "ending")
            exit_codes = {
                r: a.generation_exit_code for r, a in members.items()
                if r not in gone and (a.generation_done or 0) >= generation.number
            }
            failed = {r: code for r, code in exit_codes.items() if code != 0}
            noticed = sorted(r for r, a in members.items() if a.notice_at is not None and r not in gone)
            migrated = [r for r in gone if members[r].end_reason == "migrated"]
            moving = bool(migrated) or any(a.state == "draining" for r, a in members.items() if r not in gone)
            if generation.state == "running" and (gone or failed or noticed):
                stop_generation(session, generation, _stop_reason(gone, failed, noticed), now)
            if len(gone) + len(exit_codes) == len(members):
                # a node noticed by its cloud (not one the controller asked to stop) is being taken: its ranks saved
                # and stopped for the notice, and its attempt ends once its agent reports (or the cloud takes it)
                taken = [r for r in noticed if members[r].state != "draining"]
                reason = generation_end_reason([r for r in gone if r not in migrated] + taken, exit_codes)
                # every rank saved and stopped because the gang was asked to move: not a failure of the command
                self._end_generation(session, generation, "moved" if moving and reason == "stopped" else reason, now)
            elif generation.state == "stopping" and now - generation.stop_requested_at > self._stop_grace(session, generation):
                overdue = [(a.id, a.notice_at is not None) for r, a in members.items() if r not in gone and r not in exit_codes]
        for attempt_id, noticed_node in overdue:
            end = "migrated" if moving else "preempted" if noticed_node else "lost"
            self._end_nodes([attempt_id], Verdict(end, "the node did not stop its command with the others"))

    def _stop_grace(self, session, generation: Generation) -> float:
        """How long the ranks have to stop: the job's notice_grace, or until the cloud takes a noticed node, if
        later; and the margin for the agents to report."""
        grace = JobSpec.stored(session.get(Job, generation.job_id).spec).spot.notice_grace
        deadline = notice_deadline(session, generation)
        if deadline is not None:
            grace = max(grace, deadline - generation.stop_requested_at)
        return grace + DRAIN_MARGIN

    def _end_generation(self, session, generation: Generation, reason: str, now: float) -> None:
        generation.state = "ended"
        generation.ended_at = now
        generation.end_reason = reason
        job = session.get(Job, generation.job_id)
        add_event(
            session, at=now, kind="generation_ended", job_id=job.id,
            message=f"generation {generation.number} ended: {reason}",
        )
        if reason in ("failed", "stopped"):  # "stopped": every rank saved and stopped, yet nothing asked it to
            spec = JobSpec.stored(job.spec)
            job.restarts_on_error += 1
            if job.restarts_on_error > spec.max_restarts_on_error:
                job.failure_reason = (
                    f"the command failed {times(job.restarts_on_error)} (max_restarts_on_error={spec.max_restarts_on_error})"
                )
            elif job.state == JobState.RUNNING:
                records.transition(
                    session, job, JobState.PROVISIONING, now,
                    f"the command failed ({generation.stop_reason}); restart {job.restarts_on_error} of {spec.max_restarts_on_error}",
                )

    # ---- moving the gang ---------------------------------------------------------------------------------

    def _reconsider(self, job_id: int) -> None:
        """Move a settled gang one of whose spot nodes EC2 recommends leaving (`spot.on_rebalance: move`: whole, to
        spot in another zone, `rebalance`); else, every `reconsider_every` seconds, ask the policy of a running gang
        that may want to be elsewhere (it has a deadline, or fell back to on-demand) where it should run. Then act on
        the answer."""
        now = self.c.clock.now()
        with self.c.store.session() as session:
            job = session.get(Job, job_id)
            spec = JobSpec.stored(job.spec)
            nodes = _settled_nodes(session, job)
            if nodes is None or any(a.state != "running" for a in nodes):
                return
            decision = (self._off_rebalance(session, job, spec, nodes, now)
                        or self._policy_decision(session, job, spec, nodes, now))
        if isinstance(decision, GiveUp):
            self._end_nodes([a.id for a in nodes], Verdict("cancelled", decision.reason, job_failure=decision.reason))
        elif isinstance(decision, Launch):
            moving = [a.id for a in nodes if (a.zone, a.market) != (decision.zone, decision.market)]
            # in the gang's zone, only the nodes on the other market move
            if moving and not self.c.moves.refused_lately(job_id, decision.zone, decision.market, now):
                self._moves.start(job_id, decision, moving)
        elif isinstance(decision, Wait):  # stop paying for the nodes; the gang is placed again (and waits) once saved
            self._stop_to_wait(job_id, decision.reason)

    def _off_rebalance(self, session, job: Job, spec: JobSpec, nodes: list[Attempt], now: float) -> Launch | None:
        warned = [a for a in nodes if rebalance.wants_move(spec, a)]
        if not warned or self.c.moves.backing_off(job.id, now):
            return None
        return rebalance.spot_elsewhere(self.c, session, job, spec, warned[0], now)

    def _policy_decision(
        self, session, job: Job, spec: JobSpec, nodes: list[Attempt], now: float,
    ) -> RunningDecision | None:
        held = _asked_about(spec, nodes)
        policy = self.c.policy(spec)
        if not may_move(spec, held.market) or not hasattr(policy, "decide"):
            return None
        if not self.c.reconsider_due(job.id, now) or self.c.moves.backing_off(job.id, now):
            return None
        since = max(a.started_at or now for a in nodes if a.market == held.market)  # its youngest node there
        return policy.decide(self.c.running_context(session, job, spec, held, since, now))

    def _stop_to_wait(self, job_id: int, reason: str) -> None:
        now = self.c.clock.now()
        with self.c.store.session() as session:
            generation = latest_generation(session, job_id)
            stop_generation(session, generation, f"stopping the gang to wait: {reason}", now)
            for node in open_attempts_by_rank(session, job_id):
                records.ask_to_stop(session, node, reason, now)

    # ---- what the gang as a whole does next --------------------------------------------------------------

    def _advance(self, job_id: int) -> None:
        """Between generations: end the job, fill the empty slots, start the next generation, or give the gang back."""
        now = self.c.clock.now()
        with self.c.store.session() as session:
            job = session.get(Job, job_id)
            spec = JobSpec.stored(job.spec)
            generation = latest_generation(session, job_id)
            if generation is not None and generation.state != "ended":
                return
            attempts, standbys = split_standbys(open_attempts_by_rank(session, job_id))
            if any(a.state in ("draining", "ending") for a in attempts + standbys):
                return  # nodes stopping to move: the gang is placed again once they have all ended
            ending = self._ending_verdict(job, spec, generation, now)
            if ending is None:
                if len(attempts) < spec.resources.nodes:
                    if self._place_missing(session, job, spec, attempts, now):
                        return
                elif self._gang_ready(attempts):
                    self._start_generation(session, job, generation, attempts, now)
                    return
                if not self._gathering_timed_out(spec, generation, attempts, now):
                    return
                ending = Verdict("released", f"the gang was not complete within "
                                 f"{spec.distributed.gang_timeout:.0f} s; giving back its nodes")
            elif not attempts and not standbys:
                self._finish_job(session, job, generation, now)
                return
            to_end = [a.id for a in attempts]
            unneeded = [a.id for a in standbys]
        self._end_nodes(to_end, ending)
        self._end_nodes(unneeded, Verdict("cancelled", f"standby not needed: {ending.message}"))

    @staticmethod
    def _over(job: Job, now: float) -> bool:
        """Cancelled, failed, or past its max_wait before it ran: no node of it is launched any more."""
        return job.cancel_requested or bool(job.failure_reason) or _waited_too_long(job, JobSpec.stored(job.spec), now)

    @staticmethod
    def _ending_verdict(job: Job, spec: JobSpec, generation: Generation | None, now: float) -> Verdict | None:
        """Why every node must end now, if the job is over."""
        if job.cancel_requested:
            return Verdict("cancelled", "cancelled by the user")
        if job.failure_reason:
            return Verdict("cancelled", job.failure_reason)
        if generation is not None and generation.end_reason == "succeeded":
            return Verdict("succeeded", f"every rank of generation {generation.number} exited 0")
        if _waited_too_long(job, spec, now):
            job.failure_reason = f"max_wait of {spec.spot.max_wait:.0f} s exceeded"
            return Verdict("cancelled", job.failure_reason)
        return None

    @staticmethod
    def _finish_job(session, job: Job, generation: Generation | None, now: float) -> None:
        if job.cancel_requested:
            records.transition(session, job, JobState.CANCELLED, now, "cancelled by the user")
        elif job.failure_reason:
            records.transition(session, job, JobState.FAILED, now, job.failure_reason)
        else:
            records.transition(session, job, JobState.SUCCEEDED, now, f"every rank of generation {generation.number} exited 0")

    def _place_missing(self, session, job: Job, spec: JobSpec, survivors: list[Attempt], now: float) -> bool:
        """Record launch intents for the empty slots, where the policy says (in the survivors' zone if any)."""
        if job.not_before is not None and now < job.not_before:
            return False
        zones = self.c.job_zones(spec)
        if survivors:
            zones = [survivors[0].zone]
        ctx = placement_context(
            session, job, spec, zones, now, market=self.c.market_tries(session, job, spec, now),
            **self.c.policy_prices(spec, zones),
        )
        decision = self.c.policy(spec).place(ctx)
        if isinstance(decision, GiveUp):
            job.failure_reason = decision.reason
            if not survivors:
                records.transition(session, job, JobState.FAILED, now, decision.reason)
            return True
        if isinstance(decision, Wait):
            job.not_before = decision.until
            job.waits_for_spot = True
            if not survivors:
                job.capacity_rounds += 1
                records.transition(session, job, JobState.WAITING, now, decision.reason)
            return False
        missing = sorted(set(range(spec.resources.nodes)) - {a.node_rank for a in survivors})
        for rank in missing:
            self.c.record_launch_intent(session, job, spec, decision, now, node_rank=rank)
        nodes = ", ".join(str(rank) for rank in missing)
        records.transition(
            session, job, JobState.PROVISIONING, now,
            f"node{'s' if len(missing) > 1 else ''} {nodes}: {decision.market} in {decision.zone} ({decision.reason})",
        )
        return True

    @staticmethod
    def _gang_ready(attempts: list[Attempt]) -> bool:
        """Every slot holds a running instance whose agent reported in with an address and a port."""
        return all(
            a.state == "running" and a.agent_started_at is not None and a.address and a.rendezvous_port
            and a.notice_at is None  # a noticed node's agent ends its attempt: it runs no other generation
            for a in attempts
        )

    @staticmethod
    def _start_generation(session, job: Job, previous: Generation | None, attempts: list[Attempt], now: float) -> None:
        master = attempts[0]  # node 0: sorted by node rank, and every slot is filled
        generation = Generation(
            job_id=job.id,
            number=(previous.number + 1) if previous else 1,
            state="running",
            members={str(a.node_rank): a.id for a in attempts},
            master_addr=master.address,
            master_port=master.rendezvous_port,
            started_at=now,
        )
        session.add(generation)
        job.capacity_rounds = 0  # the whole gang was had
        if job.state != JobState.PROVISIONING:
            records.transition(session, job, JobState.PROVISIONING, now, "every node is up")
        moved = previous is not None and previous.master_addr != master.address
        records.transition(
            session, job, JobState.RUNNING, now,
            f"generation {generation.number}: {len(attempts)} nodes ({_markets(attempts)}), "
            f"master {master.address}:{master.rendezvous_port}" + (f" (was {previous.master_addr})" if moved else ""),
            running_on=attempts,
        )

    @staticmethod
    def _gathering_timed_out(spec: JobSpec, generation: Generation | None, attempts: list[Attempt], now: float) -> bool:
        if not attempts:
            return False
        since = max(min(a.created_at for a in attempts), generation.ended_at if generation else 0.0)
        return now - since > spec.distributed.gang_timeout


def _markets(nodes: list[Attempt]) -> str:
    """The nodes' markets in words: "spot", or "1 on-demand, 2 spot"."""
    counts = Counter(node.market for node in nodes)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{count} {market}" for market, count in sorted(counts.items()))


def _settled_nodes(session, job: Job) -> list[Attempt] | None:
    """The running gang's nodes while its generation trains and no move is under way; None otherwise."""
    generation = latest_generation(session, job.id)
    nodes, standbys = split_standbys(open_attempts_by_rank(session, job.id))
    if job.state != JobState.RUNNING or generation is None or generation.state != "running" or standbys:
        return None
    return nodes


def _asked_about(spec: JobSpec, nodes: list[Attempt]) -> Attempt:
    """The node whose placement a running gang's policy is asked about when its nodes are on different markets (a
    lost node replaced on the other one): with a deadline, one on spot (one is enough to be taken back); without,
    one on on-demand (the nodes that fell back are the ones that may return to spot)."""
    market = "spot" if spec.spot.deadline is not None else "on-demand"
    return next((a for a in nodes if a.market == market), nodes[0])


def _nodes(session, job_id: int) -> list[Attempt]:
    """The gang's open nodes; the standbys of a move under way are the move's (spotrun.control.gang_moves)."""
    return split_standbys(open_attempts_by_rank(session, job_id))[0]


def _stop_reason(gone: list[int], failed: dict[int, int | None], noticed: list[int]) -> str:
    if gone:
        return f"node{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))} gone"
    if noticed:
        return f"node{'s' if len(noticed) > 1 else ''} {', '.join(map(str, noticed))} got a preemption notice"
    rank, code = next(iter(failed.items()))
    return f"node {rank} exited with code {code}"


def _waited_too_long(job: Job, spec: JobSpec, now: float) -> bool:
    """Past its max_wait before it ran."""
    return spec.spot.max_wait is not None and now - job.created_at > spec.spot.max_wait and job.state != JobState.RUNNING
