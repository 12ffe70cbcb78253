"""The reconcile tick: for every live job, observe → decide → act, one small idempotent step at a time.

Every side effect is recorded before it is done: a launch first writes its attempt with a client token (so a
relaunch after a crash returns the same instance), an attempt's end is written as "ending" before the instance is
terminated (so a crash between the two repeats an idempotent terminate). Killing the controller anywhere and
running the tick again therefore loses no job, leaks no instance and launches nothing twice.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field
from sqlalchemy import select, update

from spotrun.control import backup_evidence, rebalance, reclaims, records, repricing, spot_news, start_failures
from spotrun.control.boot import agent_config, user_data
from spotrun.control.claim_keeper import ClaimKeeper
from spotrun.control.clock import Clock, WallClock
from spotrun.control.gang import GangDriver
from spotrun.control.heard import HeardAgents
from spotrun.control.moves import MoveDriver, may_move, quickest_boot
from spotrun.control.notifier import Notifier
from spotrun.control.observe import REFUSED_LAUNCHES, Verdict, judge_attempt
from spotrun.control.placement import job_prices, market_attempts, market_gpus, placement_context, policy_prices
from spotrun.control.states import LIVE, TERMINAL, JobState, state_names
from spotrun.control.stuck import StuckJobs
from spotrun.control.wording import times
from spotrun.control.tokens import attempt_token, controller_secret, hash_token
from spotrun.costs.billing import CLOUD_RULES, BillingRule, rule_for, stated_end
from spotrun.costs.market_prices import MarketPrices
from spotrun.policy import (
    GiveUp, Keep, Launch, PastAttempt, Placement, PlacementContext, PlacementPolicy, Wait, get_policy, max_spot_price,
)
from spotrun.policy.default import backoff_delay
from spotrun.providers import InstanceInfo, LaunchInvalid, LaunchRequest, NoCapacity, PriceTooLow, Provider
from spotrun.providers import ProviderError, QuotaExceeded, get_provider
from spotrun.sdk.backup_marks import BackupWriter
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Instance, Job, Store, add_event, claims, workers
from spotrun.state.db_clock import database_now
from spotrun.state.outages import is_store_outage

log = logging.getLogger("spotrun.controller")

_LAUNCH_REFUSALS: dict[type[ProviderError], str] = {
    NoCapacity: "no_capacity",
    PriceTooLow: "price_too_low",
    QuotaExceeded: "quota_exceeded",
    LaunchInvalid: "launch_invalid",
}


def _gone_at(attempt: Attempt, info: InstanceInfo | None, now: float, settings: ControllerSettings, *,
             gone_before: bool, backup_at: float | None = None) -> float:
    """When the attempt's instance was gone: when the cloud says it ended (`stated_end`). Where it gives no time: now,
    as spotrun has just terminated it, unless it was gone before (`gone_before`: the cloud had ended it, as Azure
    forgets a spot VM it evicted with the Delete policy), or the attempt was lost and the cloud cannot describe the
    instance at all (EC2 no longer lists one an hour after it went): then when the controller, watching, would have
    called it lost, so that a controller that was down is not billed the outage; or later, at `backup_at`, the
    store's time of the newest backup its agent made (`backup_evidence`): it ran until then, unheard."""
    if info is not None and info.terminated_at:
        return stated_end(attempt.started_at, info.terminated_at, now)
    due = _due_as_lost_at(attempt, settings)
    if _billed_as_lost(attempt, info, gone_before=gone_before) and due is not None:
        return stated_end(attempt.started_at, _alive_until(due, backup_at, now), now)
    return now


def _billed_as_lost(attempt: Attempt, info: InstanceInfo | None, *, gone_before: bool) -> bool:
    """Whether `_gone_at` bills the attempt's instance to when it would have been lost (`_due_as_lost_at`): its cloud
    states no end, and it was gone before spotrun's terminate, or the attempt was lost and the cloud cannot describe
    the instance."""
    if info is not None and info.terminated_at:
        return False
    cannot_describe = attempt.end_reason == "lost" and (info is None or info.state == "unknown")
    return gone_before or cannot_describe


def _alive_until(due: float, backup_at: float | None, now: float) -> float:
    """The later of `due` and `backup_at`. The store's clock is not this one: a backup it dates after now is not
    trusted (a clock ahead would bill the whole outage), and one before `due` says nothing new."""
    if backup_at is None or backup_at > now:
        return due
    return max(due, backup_at)


def _due_as_lost_at(attempt: Attempt, settings: ControllerSettings) -> float | None:
    """When the controller would have called the attempt's instance lost: the heartbeat timeout after its agent's
    last heartbeat (it may have run on, unheard, that long), or the boot timeout after its start where the agent
    never reported. None: it never started."""
    if attempt.last_heartbeat_at is not None:
        return attempt.last_heartbeat_at + settings.heartbeat_timeout
    if attempt.started_at is not None:
        return attempt.started_at + settings.boot_timeout
    return None


def _first_to_mark(session, attempt_id: int, *, marked_too: bool = False) -> bool:
    """Whether this transaction marks the open attempt "ending" first (`marked_too`: or finds it marked, and ends
    it): the write takes the row's lock (PostgreSQL) or the database's (SQLite), so a second worker waits and then
    finds it marked, or ended."""
    still_open = [Attempt.id == attempt_id, Attempt.ended_at.is_(None)]
    if not marked_too:
        still_open.append(Attempt.state != "ending")
    marking = update(Attempt).where(*still_open).values(state="ending")
    return session.execute(marking, execution_options={"synchronize_session": False}).rowcount > 0


class ClaimLost(Exception):
    """This worker no longer holds the job's claim: another worker drives it."""


# What the settings allow, checked where they are read from the environment (`server.daemon.settings_from_env`).
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
SecondsOrZero = Annotated[float, Field(ge=0, allow_inf_nan=False)]


@dataclass
class ControllerSettings:
    controller_url: str
    heartbeat_timeout: Seconds = 30.0
    boot_timeout: Seconds = 120.0
    launch_timeout: Seconds = 300.0
    unknown_timeout: Seconds = 600.0  # describe failing and no heartbeat for this long: the instance is lost
    agent_heartbeat_interval: Seconds = 1.0
    backoff_base: SecondsOrZero = 5.0
    backoff_max: SecondsOrZero = 300.0
    sweep_every_ticks: Annotated[int, Field(ge=1)] = 20
    claim_ttl: Seconds = 30.0  # a worker's hold on a job; renewed every tick
    reconsider_every: SecondsOrZero = 60.0  # how often a running job's placement is put to its policy again
    # seconds of other jobs' spot tries of the same instance type policies see
    market_history: SecondsOrZero = 14 * 86400.0
    # ... and at most this many of them, the newest: a job waiting for spot is refused ~800 times a day, and every
    # placement reads the market's tries (a placement with 20,000: ~140 ms here, with 400,000: 2 s; benchmarks/
    # long_wait.py --market-tries). Jobs waiting together are refused about as often as one (they share what their
    # tries found), so that is about three weeks of the market (benchmarks/waiting_jobs.py).
    market_history_tries: Annotated[int, Field(ge=0, le=2**31 - 1)] = 20_000
    # how each cloud charges for the seconds an instance is held, by provider name (`costs.billing`)
    billing_rules: Mapping[str, BillingRule] = field(default_factory=lambda: dict(CLOUD_RULES))
    # how long the controller waits for a job's checkpoint store, read for the newest backup of an instance gone
    # without a stated end (`backup_evidence`); past it, the attempt is billed without
    store_lookup_timeout: Seconds = 10.0


class Controller:
    def __init__(
        self,
        store: Store,
        settings: ControllerSettings,
        *,
        clock: Clock | None = None,
        provider_factory: Callable[[str], Provider] = get_provider,
        prices: Callable[..., tuple[float, float]] | None = None,
        worker_id: str | None = None,
        heard: HeardAgents | None = None,
    ) -> None:
        """With `worker_id`, the controller is one of several workers and drives only the jobs it has claimed;
        without, it drives every live job (one controller, or tests). `prices` (catalog_prices's signature): by
        default the catalog's, spot's per zone as the cloud quotes it where it can (`MarketPrices`). `heard`: the
        heartbeats the agent API of this process received (`control.heard`), shared with it."""
        self.store = store
        self.settings = settings
        self.clock = clock or WallClock()
        # Since when this controller has watched its attempts without a gap: its start, or the last store outage it
        # met (the next tick that reaches the store comes a tick later). Heartbeats the agents sent before then may
        # never have been recorded (the agent API, on the same store, could not write them): no attempt is taken for
        # lost, nor for never booted, until it has had its timeout since (`observe.judge_attempt`).
        self.watching_since = self.clock.now()
        self.heard = heard if heard is not None else HeardAgents(self.clock.now)
        self.drive_began = 0.0  # time.monotonic() as the current drive began (the daemon's lease keeper reads it)
        self._provider_factory = provider_factory
        self._prices = prices if prices is not None else MarketPrices(self.provider)
        self.worker_id = worker_id
        self._announced_until = -math.inf  # when this worker's announcement runs out (`_announce`)
        self._providers: dict[str, Provider] = {}
        self._clouds_on_record: set[str] | None = None  # read once, at the first sweep (`_clouds_to_sweep`)
        self._unswept: dict[str, bool] = {}  # clouds whose last sweep failed, that failure told (`_sweep_failed`)
        self._ticks = 0
        self._reconsidered_at: dict[int, float] = {}
        self._gang = GangDriver(self)
        self._stuck = StuckJobs(store, self.clock.now)
        self.moves = MoveDriver(self)
        self.notifier = Notifier(store, self.clock.now, worker_id=worker_id, claim_ttl=settings.claim_ttl,
                                 claim_now=self._claim_now)

    # ---- the loop body -------------------------------------------------------------------------------------

    def tick(self) -> None:
        ttl, renew = self.settings.claim_ttl, self._renew_claims if self.worker_id else None
        with ClaimKeeper(renew, self.clock.now, every=ttl / 3, give_up_after=10 * ttl) as keeper:
            for job_id in self._watched(self._live_job_ids):
                self.drive_began = time.monotonic()  # the daemon's lease keeper judges progress by it
                keeper.drive_started()
                try:
                    self.drive(job_id)
                except ClaimLost as lost:  # another worker drives it now: nothing was written for it
                    log.info("%s", lost)
                except Exception as error:  # one broken job must not stop the others; the next tick retries it
                    self._note_outage(error)
                    self._stuck.failed(job_id, error)
                else:
                    self._stuck.went_on(job_id)
        reclaims.settle_awaiting(self)
        self._notify()
        self._ticks += 1
        if self._ticks % self.settings.sweep_every_ticks == 1:
            self.sweep_orphans()

    def _watched(self, live_job_ids: Callable[[], list[int]]) -> list[int]:
        """The live jobs; a store outage that keeps them from being read restarts the watch (`_note_outage`)."""
        try:
            return live_job_ids()
        except Exception as error:
            self._note_outage(error)
            raise

    def watched_since(self, attempt: Attempt) -> float:
        """Since when the attempt's silence counts: the controller's watch (`watching_since`), or the last heartbeat
        this process's agent API received from it, which the store may not have recorded (`control.heard`)."""
        return max(self.watching_since, self.heard.last(attempt.id))

    def _note_outage(self, error: Exception) -> None:
        """A store outage: the watch starts again now (a job driven later in this tick, once the store answers again,
        is judged from here on)."""
        if is_store_outage(error):
            self.watching_since = self.clock.now()
            log.warning("the store is unavailable: heartbeats sent meanwhile may be lost, so no attempt is taken for "
                        "lost before it has had its timeout from now")

    def _notify(self) -> None:
        """The jobs' owners told what the tick recorded (spec `notify`): posted apart from the tick, once committed."""
        try:
            self.notifier.run()
        except Exception:  # the store away: the next tick reads the cursors again; no job waits for its webhook
            log.exception("finding the notifications due failed")

    def drive(self, job_id: int) -> None:
        """One step for one job; safe to repeat after a crash at any point."""
        with self.store.session() as session:
            if self.worker_id and not claims.holds(session, self.worker_id, job_id, self._claim_now(session)):
                return
            job = session.get(Job, job_id)
            if job is None or JobState(job.state) in TERMINAL:
                return
            attempt, standby = records.open_attempts(session, job_id)
        if JobSpec.stored(job.spec).resources.nodes > 1:
            self._gang.drive(job_id)
            return
        if attempt is None:
            self._drive_without_attempt(job)
        elif attempt.state == "ending":
            self._finish_attempt(attempt.id)
        elif attempt.instance_id is None and job.cancel_requested:  # not launched yet (a launch being retried)
            self.begin_end(attempt.id, Verdict("cancelled", "cancelled by the user before its instance was launched"))
            self._finish_attempt(attempt.id)  # finds an instance a lost answer made, by its token, and ends it
        elif attempt.instance_id is None:
            self._launch(attempt.id)
        else:
            self._watch(job, attempt, moving=standby is not None)
        if standby is not None:
            self.moves.drive(standby.id)

    # ---- no attempt open: place the job, or end it ---------------------------------------------------------

    def _drive_without_attempt(self, job: Job) -> None:
        now = self.clock.now()
        spec = JobSpec.stored(job.spec)
        with self.store.session() as session:
            job = session.get(Job, job.id)
            if job.cancel_requested:
                self.fence(session, job.id)  # a worker that stalled before this writes nothing on a job another placed
                records.transition(session, job, JobState.CANCELLED, now, "cancelled by the user")
                return
            if spec.spot.max_wait is not None and now - job.created_at > spec.spot.max_wait:
                self.fence(session, job.id)
                job.failure_reason = f"max_wait of {spec.spot.max_wait:.0f} s exceeded"
                records.transition(session, job, JobState.FAILED, now, job.failure_reason)
                return
            if job.state == JobState.WAITING and job.not_before is not None and now < job.not_before:
                return
            attempt_id = self._place(session, job, spec, now)
        if attempt_id is not None:
            self._launch(attempt_id)

    def _place(self, session, job: Job, spec: JobSpec, now: float) -> int | None:
        zones = self.job_zones(spec)
        ctx = placement_context(
            session, job, spec, zones, now, market=self.market_tries(session, job, spec, now),
            **self.policy_prices(spec, zones),
        )
        decision = self.policy(spec).place(ctx)
        if not isinstance(decision, Launch):  # (a launch's intent is fenced where it is recorded)
            self.fence(session, job.id)  # the answer may have taken long (the cloud's zones): still this worker's?
        if isinstance(decision, GiveUp):
            job.failure_reason = decision.reason
            records.transition(session, job, JobState.FAILED, now, decision.reason)
            return None
        if isinstance(decision, Wait):
            job.not_before = decision.until
            job.waits_for_spot = True
            job.capacity_rounds += 1
            records.transition(session, job, JobState.WAITING, now, decision.reason)
            return None
        attempt = self.record_launch_intent(session, job, spec, decision, now)
        records.transition(
            session, job, JobState.PROVISIONING, now, f"attempt {attempt.number}: {decision.market} in {decision.zone} ({decision.reason})"
        )
        return attempt.id

    def job_zones(self, spec: JobSpec) -> list[str]:
        """The zones of the job's cloud that offer its instance type with its accelerators."""
        resources = spec.resources
        return self.provider(resources.cloud).zones(resources.instance_type, resources.accelerators)

    def policy_prices(self, spec: JobSpec, zones: list[str]) -> dict[str, Any]:
        """The job's prices for its policy, spot's in each of `zones` (`placement.policy_prices`, from this
        controller's price function)."""
        return policy_prices(spec, self._prices, zones)

    def market_tries(self, session, job: Job, spec: JobSpec, now: float) -> tuple[PastAttempt, ...]:
        """Other jobs' recent spot tries in the job's market, for its policy to learn from."""
        return market_attempts(
            session, job, spec, now, self.settings.market_history, limit=self.settings.market_history_tries
        )

    def record_launch_intent(
        self, session, job: Job, spec: JobSpec, decision: Launch, now: float, node_rank: int = 0
    ) -> Attempt:
        """The attempt row, with its client token, written before anything is launched; only by the worker that
        holds the job's claim (``fence``, after the price quote: the fence holds a lock, SQLite's on every write)."""
        cloud = spec.resources.cloud
        price, on_demand = job_prices(spec, decision.market, decision.zone, self._prices)
        self.fence(session, job.id)
        client_token = f"sr-{job.id}-{uuid.uuid4().hex[:16]}"
        attempt = Attempt(
            job_id=job.id,
            number=records.next_attempt_number(session, job.id),
            state="launching",
            provider=cloud,
            zone=decision.zone,
            market=decision.market,
            instance_type=spec.resources.instance_type,
            gpus=market_gpus(spec),
            price_per_hour=price,
            on_demand_price_per_hour=on_demand,
            max_price=max_spot_price(on_demand, spec.spot.max_price) if decision.market == "spot" else None,
            client_token=client_token,
            token_hash=hash_token(attempt_token(controller_secret(session), client_token)),
            created_at=now,
            node_rank=node_rank,
        )
        session.add(attempt)
        session.flush()
        return attempt

    # ---- launching ----------------------------------------------------------------------------------------

    def _launch(self, attempt_id: int) -> None:
        refusal = self.try_launch(attempt_id)
        if refusal is not None:
            self.record_launch_refusal(attempt_id, refusal, back_off_job=True)

    def try_launch(self, attempt_id: int) -> ProviderError | None:
        """Launch the attempt's instance (idempotent on its client token); the provider's refusal, if any. A
        launch failing for an unknown reason is retried by later ticks until launch_timeout, then refused."""
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            job = attempt.job
            token = attempt_token(controller_secret(session), attempt.client_token)
            config = agent_config(job, attempt, token, self.settings.controller_url, self.settings.agent_heartbeat_interval,
                                  alternates=workers.agent_urls(session, self._claim_now(session)))
            request = LaunchRequest(
                zone=attempt.zone,
                market=attempt.market,  # type: ignore[arg-type]
                instance_type=attempt.instance_type,
                client_token=attempt.client_token,
                user_data=user_data(config),
                max_price=attempt.max_price,
                accelerators=JobSpec.stored(job.spec).resources.accelerators,
            )
        provider = self.provider(attempt.provider)
        try:
            info = provider.launch(request)
        except ProviderError as refusal:
            return refusal
        except Exception as error:
            refusal = self._record_launch_error(attempt_id, error)
            found = self._launched_unheard(provider, request.client_token) if refusal is not None else None
            if found is None:
                return refusal
            info = found
        self._record_instance(attempt_id, info)
        return None

    def _launched_unheard(self, provider: Provider, client_token: str) -> InstanceInfo | None:
        """The instance a launch whose every answer was lost made after all (found by its client token): the
        attempt takes it rather than ending with it running, unbilled, until the orphan sweep terminates it."""
        try:
            return provider.find_by_token(client_token)
        except Exception:
            log.warning("looking up the launch by its client token failed", exc_info=True)
            return None

    def _find_unrecorded_instance(self, attempt: Attempt) -> Attempt:
        """An attempt ending with no instance on record may still have one: its launch went through but the answer
        was lost (a timeout, a controller that died before recording it). Found by its client token, it is recorded,
        so that it is terminated and billed now, not left running, unbilled, to the next orphan sweep."""
        info = self.provider(attempt.provider).find_by_token(attempt.client_token)
        if info is None:
            return attempt
        with self.store.session() as session:
            found = session.get(Attempt, attempt.id)
            _add_instance_row(session, found, info, self.clock.now())
            found.instance_id = info.instance_id
            found.started_at = found.started_at or info.launched_at or self.clock.now()
            add_event(session, at=self.clock.now(), kind="instance_launched", job_id=found.job_id, attempt_id=found.id,
                      message=f"attempt {found.number}: instance {info.instance_id}, launched but not recorded, "
                              "found by its client token as the attempt ends")
            return found

    def _record_instance(self, attempt_id: int, info: InstanceInfo) -> None:
        now = self.clock.now()
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            self.fence(session, attempt.job_id)  # the worker that took the job over launches by the same token
            _add_instance_row(session, attempt, info, now)
            attempt.instance_id = info.instance_id
            attempt.started_at = info.launched_at or now
            attempt.state = "running"
            if (attempt.job.spec.get("resources") or {}).get("nodes", 1) <= 1:
                # a gang's rounds end once every slot is filled (`GangDriver._start_generation`): one node placed
                # of a gang whose last node is refused everywhere found no capacity for the job
                attempt.job.capacity_rounds = 0
            add_event(
                session,
                at=now,
                kind="instance_launched",
                job_id=attempt.job_id,
                attempt_id=attempt.id,
                message=f"attempt {attempt.number}: {attempt.market} instance {info.instance_id} in {info.zone} "
                f"at ${attempt.price_per_hour:.4f}/h",
            )
        # apart from the fenced transaction above: waking the jobs waiting for spot prices them, which may ask the
        # cloud, and the fence's lock (SQLite's on every write) would be held across that call
        with self.store.session() as session:
            spot_news.spot_started(session, session.get(Attempt, attempt_id), now, self._prices)

    def record_launch_refusal(self, attempt_id: int, refusal: ProviderError, *, back_off_job: bool) -> None:
        """End the refused attempt. `back_off_job`: it was the job's placement, which the refusal moves on (fails,
        or backs off); False for a move's standby, whose job runs on where it is."""
        reason = next((r for kind, r in _LAUNCH_REFUSALS.items() if isinstance(refusal, kind)), "launch_error")
        now = self.clock.now()
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            self.fence(session, attempt.job_id)
            records.end_attempt(session, attempt, reason=reason, ended_at=now, billed_seconds=0.0)
            add_event(
                session, at=now, kind="launch_refused", job_id=attempt.job_id, attempt_id=attempt.id,
                message=f"{attempt.market} in {attempt.zone}: {refusal}",
            )
            if not back_off_job:
                return
            if reason == "launch_invalid":  # retried, it failed alike forever
                job = attempt.job
                job.failure_reason = f"the cloud cannot take this job's launch: {refusal}"
                records.transition(session, job, JobState.FAILED, now, job.failure_reason)
            elif reason in ("quota_exceeded", "launch_error"):
                job = attempt.job
                delay = backoff_delay(job.capacity_rounds, self.settings.backoff_base, self.settings.backoff_max)
                job.not_before = now + delay
                job.waits_for_spot = False
                job.capacity_rounds += 1
                records.transition(session, job, JobState.WAITING, now, f"{refusal}; retrying in {delay:.0f} s")

    def _record_launch_error(self, attempt_id: int, error: Exception) -> ProviderError | None:
        """A launch that failed for an unknown reason is retried with the same token until launch_timeout."""
        now = self.clock.now()
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            add_event(
                session, at=now, kind="launch_error", job_id=attempt.job_id, attempt_id=attempt.id,
                message=f"launch failed, will retry with the same client token: {error}",
            )
        if now - attempt.created_at > self.settings.launch_timeout:
            return ProviderError(f"gave up launching after {self.settings.launch_timeout:.0f} s: {error}")
        return None

    # ---- watching a placed attempt -----------------------------------------------------------------------

    def _watch(self, job: Job, attempt: Attempt, moving: bool = False) -> None:
        now = self.clock.now()
        info = self.describe(attempt)
        verdict = judge_attempt(job, attempt, info, now, self.settings, self.watched_since(attempt))
        if verdict is None:
            if info is not None:  # not while the instance may be gone: its price would bill seconds after it
                self.follow_spot_price(job, attempt, now)
            if attempt.state == "running" and job.state == JobState.RUNNING and not moving:
                if not rebalance.move_off(self, job, attempt, now):
                    self._reconsider(job, attempt, now)
            return
        if verdict.end_reason is None:
            self._mark_running(attempt.id, verdict)
        else:
            self._mark_ran_unseen(attempt.id)  # before the end's events: the command ran before it ended
            self.begin_end(attempt.id, verdict)
            self._finish_attempt(attempt.id)

    def describe(self, attempt: Attempt) -> InstanceInfo | None:
        # an attempt not yet ending: spotrun has not terminated its instance (it does only once the attempt ends)
        recorded = _as_recorded(attempt) if attempt.end_reason is None else None
        return self.describe_instance(attempt.provider, attempt.instance_id, recorded)

    def describe_instance(self, provider: str, instance_id: str, recorded: InstanceInfo | None = None) -> InstanceInfo | None:
        """The provider's answer; `recorded`: what the store holds of an instance spotrun has not terminated, for a
        provider that judges a vanished instance by what it saw of it (Azure's `recall`), and that a restarted
        controller has not seen."""
        try:
            cloud = self.provider(provider)
            if recorded is not None and hasattr(cloud, "recall"):
                cloud.recall(recorded)
            return cloud.describe(instance_id)
        except Exception:  # a failed probe is "unknown", never "gone"
            log.warning("describe %s failed", instance_id, exc_info=True)
            return None

    def follow_spot_price(self, job: Job, attempt: Attempt, now: float) -> None:
        """Bill a running spot attempt at its zone's price as the cloud quotes it now (`repricing`)."""
        if not repricing.follows_price(attempt):
            return
        if (job.spec.get("resources") or {}).get("prices") is not None:  # the job's own prices: one for all time
            return
        quoted = self.quoted_spot_price(attempt.provider, attempt.instance_type, attempt.zone)
        if quoted is None or quoted == attempt.price_per_hour:
            return
        with self.store.session() as session:
            fresh = session.get(Attempt, attempt.id)
            if repricing.follows_price(fresh):  # not ended since it was read
                repricing.reprice(session, fresh, quoted, now)

    def quoted_spot_price(self, cloud: str, instance_type: str, zone: str) -> float | None:
        """Spot's $/h in `zone` as the cloud quotes it (`MarketPrices.quotes`); None where there is no quote. A quote
        that failed gives None, never the catalog's price in its stead."""
        quotes = getattr(self._prices, "quotes", None)
        return quotes(cloud, instance_type).get(zone) if quotes is not None else None

    def _reconsider(self, job: Job, attempt: Attempt, now: float) -> None:
        """Every `reconsider_every` seconds, ask a running job's policy whether it should move (deadline-aware
        policies do: back to spot when it returns, to on-demand when the deadline needs it; a job without a deadline
        that fell back to on-demand goes back to spot after a while). A move is made before it breaks anything: the
        new instance is launched first, and the job keeps running where it is until that instance is up (see
        spotrun.control.moves)."""
        spec = JobSpec.stored(job.spec)
        if not may_move(spec, attempt.market) or not self.reconsider_due(job.id, now):
            return
        policy = self.policy(spec)
        if not hasattr(policy, "decide") or self.moves.backing_off(job.id, now):
            return
        with self.store.session() as session:
            ctx = self.running_context(session, session.get(Job, job.id), spec, attempt, attempt.started_at or now, now)
        decision = policy.decide(ctx)
        if isinstance(decision, Keep):
            return
        if isinstance(decision, Launch) and (decision.zone, decision.market) == (attempt.zone, attempt.market):
            return
        if isinstance(decision, GiveUp):
            self.begin_end(attempt.id, Verdict("cancelled", decision.reason, job_failure=decision.reason))
            self._finish_attempt(attempt.id)
            return
        if isinstance(decision, Launch):
            if not self.moves.refused_lately(job.id, decision.zone, decision.market, now):
                self.moves.start(job.id, attempt.id, decision)
        else:  # Wait: stop paying for the instance; the job is placed again (and waits) once its trainer saved
            self.request_move(attempt.id, decision.reason)

    def reconsider_due(self, job_id: int, now: float) -> bool:
        """Whether `reconsider_every` has passed since the job's policy was last asked about it running; if so, it
        counts as asked now."""
        if now - self._reconsidered_at.get(job_id, 0.0) < self.settings.reconsider_every:
            return False
        self._reconsidered_at[job_id] = now
        return True

    def running_context(
        self, session, job: Job, spec: JobSpec, attempt: Attempt, since: float, now: float
    ) -> PlacementContext:
        """What a running job's policy sees: the job on `attempt`'s market and zone since `since`, asked every
        `reconsider_every`, at that attempt's prices (spot at the job's reference price while it is not on spot) and
        spot's in each zone."""
        zones = self.job_zones(spec)
        prices = self.policy_prices(spec, zones)
        if attempt.market == "spot":  # the instance held bills its own price
            prices["spot_price"] = attempt.price_per_hour
        prices["on_demand_price"] = attempt.on_demand_price_per_hour
        return placement_context(
            session, job, spec, zones, now,
            market=self.market_tries(session, job, spec, now),
            current=Placement(attempt.zone, attempt.market, since),  # type: ignore[arg-type]
            step=self.settings.reconsider_every,
            move_overlap=quickest_boot(job.placed_attempts) or 0.0,
            **prices,
        )

    def request_move(self, attempt_id: int, reason: str) -> None:
        """Ask the attempt's agent (in its next heartbeat's answer) to checkpoint and stop, so the job can move."""
        now = self.clock.now()
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            if attempt.state == "running" and attempt.notice_at is None:  # noticed: it is stopping for the cloud
                records.ask_to_stop(session, attempt, reason, now)

    def _mark_running(self, attempt_id: int, verdict: Verdict) -> None:
        now = self.clock.now()
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            self.fence(session, attempt.job_id)  # judged before a describe that may have stalled past the claim
            session.refresh(attempt)
            if attempt.ended_at is None and attempt.state != "ending" and attempt.job.state != JobState.RUNNING:
                _record_running(session, attempt, now, verdict.message)

    def _mark_ran_unseen(self, attempt_id: int) -> None:
        """The job's move to RUNNING for an attempt about to end whose command started and ended between two ticks:
        recorded before the end's events (readers list them by id) and dated when the job began to run on it: its
        agent's start, or the job's previous move if later (a standby that took over had reported in before it)."""
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            self.fence(session, attempt.job_id)
            session.refresh(attempt)
            job = attempt.job
            if attempt.agent_started_at is not None and attempt.ended_at is None and job.state == JobState.PROVISIONING:
                _record_running(session, attempt, max(attempt.agent_started_at, job.updated_at),
                                f"agent started on {attempt.instance_id}")

    def fence(self, session, job_id: int) -> None:
        """In a transaction that decides for the job (a launch, an end): ClaimLost unless this worker still holds
        the job's claim, which then stays its own until the commit. A worker that stalled past its claim (a long
        cloud call, a paused process) had placed a job another worker had placed meanwhile: two instances ran it."""
        if self.worker_id and not claims.holds(session, self.worker_id, job_id, self._claim_now(session), lock=True):
            raise ClaimLost(f"job {job_id}: its claim is no longer this worker's ({self.worker_id})")

    def begin_end(self, attempt_id: int, verdict: Verdict, *, fenced: bool = True) -> None:
        """Mark the attempt "ending" with its verdict. `fenced=False`: an attempt of a job that has ended, whose claim
        no worker holds any more; the first worker to mark it does (a compare-and-set), the others do nothing."""
        with self.store.session() as session:
            if not fenced and not _first_to_mark(session, attempt_id):
                return
            attempt = session.get(Attempt, attempt_id)
            if fenced:
                self.fence(session, attempt.job_id)
            attempt.state = "ending"
            attempt.end_reason = verdict.end_reason
            if verdict.job_failure:
                attempt.job.failure_reason = verdict.job_failure
            add_event(
                session, at=self.clock.now(), kind="attempt_ending", job_id=attempt.job_id, attempt_id=attempt.id,
                message=f"attempt {attempt.number}: {verdict.message}",
                data=start_failures.ending_data(verdict.start_failure),
            )

    def _finish_attempt(self, attempt_id: int) -> None:
        self._mark_ran_unseen(attempt_id)  # an end marked without it (by an older spotrun): the job ran, then ended
        self.finish_attempt(attempt_id, self._after_single_attempt)

    def finish_attempt(self, attempt_id: int, after: Callable[..., None], *, fenced: bool = True) -> None:
        """Terminate the instance (idempotent), bill the attempt, and call `after(session, attempt, now)` in the
        same transaction to move the job on. `fenced=False`: as `begin_end`'s, the first worker to end it does."""
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
        if attempt.instance_id is None and attempt.end_reason not in REFUSED_LAUNCHES:
            attempt = self._find_unrecorded_instance(attempt)
        rule = self.billing_rule(attempt.provider)
        info, release_at, ended_by_cloud = None, None, False
        if attempt.instance_id is not None:
            # read before spotrun's terminate: that may stamp a new end on an instance the cloud ended long ago (EC2
            # terminating a stopped one), and a controller that was down would bill the outage
            info = self.describe(attempt)
            ended_by_cloud = info is not None and info.state == "terminated"
            release_at = None if ended_by_cloud else reclaims.release_time(attempt, rule, self.clock.now())
            if release_at is None:
                self.provider(attempt.provider).terminate(attempt.instance_id)
                if not ended_by_cloud:
                    info = self.describe(attempt)
        backup_at = self._newest_backup_at(attempt, info, ended_by_cloud) if release_at is None else None
        now = self.clock.now()
        with self.store.session() as session:
            if not fenced and not _first_to_mark(session, attempt_id, marked_too=True):
                return
            attempt = session.get(Attempt, attempt_id)
            if fenced:
                self.fence(session, attempt.job_id)  # a worker that stalled in the cloud calls above writes nothing
            if attempt.ended_at is not None:
                return  # ended meanwhile (by the worker that took the job over while this one stalled)
            ended_at = now
            if release_at is not None:
                reclaims.leave_to_cloud(session, attempt, release_at, now)
            elif attempt.instance_id is not None:
                ended_at = _gone_at(attempt, info, now, self.settings, gone_before=ended_by_cloud, backup_at=backup_at)
                self._record_instance_gone(session, attempt, ended_at, info)
            placed = attempt.started_at is not None and attempt.end_reason not in REFUSED_LAUNCHES
            billed = ended_at - attempt.started_at if placed else 0.0
            records.end_attempt(session, attempt, reason=attempt.end_reason, ended_at=ended_at, billed_seconds=billed)
            # an instance left to the cloud is billed again once it is gone (`reclaims.settle_awaiting`)
            attempt.charged_seconds = rule.charged_seconds(
                attempt.billed_seconds, market=attempt.market, reclaimed=bool(info and info.reclaimed))
            after(session, attempt, now)
        # as `_record_instance`'s: apart from the fenced transaction, which must not hold its lock across a quote
        with self.store.session() as session:
            spot_news.spot_ended(session, session.get(Attempt, attempt_id), bool(info and info.reclaimed), now,
                                 self._prices)

    def _newest_backup_at(self, attempt: Attempt, info: InstanceInfo | None, ended_by_cloud: bool) -> float | None:
        """Where the attempt's instance is billed to when it would have been lost (`_gone_at`): the store's time of
        the newest backup its agent made, read once, here, before the end is recorded; else None, with no read."""
        if (attempt.instance_id is None or _due_as_lost_at(attempt, self.settings) is None
                or not _billed_as_lost(attempt, info, gone_before=ended_by_cloud)):
            return None
        with self.store.session() as session:
            store_url = JobSpec.stored(session.get(Job, attempt.job_id).spec).checkpoint.store
        return backup_evidence.newest_backup_at(
            store_url, BackupWriter(attempt.job_id, attempt.id), self.settings.store_lookup_timeout)

    def _after_single_attempt(self, session, attempt: Attempt, now: float) -> None:
        self._after_attempt(session, attempt, now)
        self.moves.after_predecessor_end(session, attempt, now)

    def _record_instance_gone(self, session, attempt: Attempt, ended_at: float, info: InstanceInfo | None) -> None:
        instance = session.get(Instance, attempt.instance_id)
        if instance is not None:
            instance.state = "terminated"
            instance.terminated_at = ended_at
            instance.reclaimed = bool(info and info.reclaimed)

    def _after_attempt(self, session, attempt: Attempt, now: float) -> None:
        job, reason = attempt.job, attempt.end_reason
        spec = JobSpec.stored(job.spec)
        if job.cancel_requested:
            records.transition(session, job, JobState.CANCELLED, now, "cancelled by the user")
        elif job.failure_reason and reason in ("cancelled", "launch_invalid"):
            records.transition(session, job, JobState.FAILED, now, job.failure_reason)
        elif reason == "succeeded":
            records.transition(session, job, JobState.SUCCEEDED, now, "the command exited 0")
        elif reason == "preempted":
            job.preemptions += 1
            records.transition(session, job, JobState.PREEMPTED, now, f"preemption {job.preemptions}; resuming from the latest checkpoint")
        elif reason == "failed":
            job.restarts_on_error += 1
            if job.restarts_on_error > spec.max_restarts_on_error:
                job.failure_reason = start_failures.job_failure_reason(
                    session, attempt, job.restarts_on_error, spec.max_restarts_on_error, f"instance {attempt.instance_id}"
                ) or f"the command failed {times(job.restarts_on_error)} (max_restarts_on_error={spec.max_restarts_on_error})"
                records.transition(session, job, JobState.FAILED, now, job.failure_reason)
            else:
                records.transition(session, job, JobState.PROVISIONING, now, f"the command failed; restart {job.restarts_on_error} of {spec.max_restarts_on_error}")
        elif reason == "migrated":
            records.transition(session, job, JobState.PROVISIONING, now, "moving to a better placement")
        else:  # lost: the instance or its agent vanished without a word; not the user's fault
            records.transition(session, job, JobState.PROVISIONING, now, f"attempt {reason}; placing the job again")

    # ---- housekeeping --------------------------------------------------------------------------------------

    def sweep_orphans(self) -> None:
        """Terminate instances whose attempt has already ended (e.g. a terminate lost in a crash), and end the
        attempts still open of jobs that have ended."""
        try:
            self.moves.end_leftovers()
        except Exception:
            log.exception("ending the attempts left open by ended jobs failed")
        for name in self._clouds_to_sweep():
            try:
                provider = self.provider(name)
                instances = provider.list_instances()
            except Exception as error:
                self._sweep_failed(name, error)
                continue
            if self._unswept.pop(name, False):
                log.info("%s can be swept for orphan instances again", name)
            live = [i for i in instances if i.state in ("pending", "running") and i.client_token]
            if not live:
                continue
            with self.store.session() as session:
                ended = set(
                    session.scalars(
                        select(Attempt.client_token).where(
                            Attempt.client_token.in_([i.client_token for i in live]), Attempt.state == "ended"
                        )
                    )
                )
                left_to_cloud = reclaims.awaiting_ids(session)  # settled by `reclaims`, at their release time
            for info in live:
                if info.client_token in ended and info.instance_id not in left_to_cloud:
                    log.warning("terminating orphan instance %s", info.instance_id)
                    self._bill_unheard_launch(info)  # first: once terminated, no later sweep would see it to bill
                    provider.terminate(info.instance_id)

    def _sweep_failed(self, cloud: str, error: Exception) -> None:
        """Told in one line once, until the cloud can be swept again: one whose credentials are gone fails at every
        sweep, and a traceback each time would bury the rest of the log. The repeats, with it, are debug."""
        if self._unswept.get(cloud):
            log.debug("listing %s instances failed again", cloud, exc_info=True)
            return
        self._unswept[cloud] = True
        log.warning("cannot sweep %s for orphan instances (%s: %s); not told again until it can",
                    cloud, type(error).__name__, error)

    def _clouds_to_sweep(self) -> list[str]:
        """The clouds this controller has used, and every cloud the store's attempts ran on (read at its first sweep):
        one restarted after the last job on a cloud ended would never list that cloud again, an orphan left there
        running for good."""
        if self._clouds_on_record is None:
            with self.store.session() as session:
                self._clouds_on_record = set(session.scalars(select(Attempt.provider).distinct()))
        return sorted(self._clouds_on_record | self._providers.keys())

    def _bill_unheard_launch(self, info: InstanceInfo) -> None:
        """An orphan whose attempt ended with no instance on record (its launch was never heard of, and the lookup
        by its token failed too) is that attempt's: it is recorded and billed now, not left unbilled."""
        now = self.clock.now()
        with self.store.session() as session:
            attempt = session.scalar(select(Attempt).where(Attempt.client_token == info.client_token))
            if attempt is None or attempt.instance_id is not None:
                return
            _add_instance_row(session, attempt, info, now)
            attempt.instance_id = info.instance_id
            self._record_instance_gone(session, attempt, now, None)
            attempt.started_at = info.launched_at or attempt.created_at
            attempt.billed_seconds = max(now - attempt.started_at, 0.0)
            attempt.charged_seconds = self.billing_rule(attempt.provider).charged_seconds(
                attempt.billed_seconds, market=attempt.market, reclaimed=False)
            add_event(session, at=now, kind="orphan_billed", job_id=attempt.job_id, attempt_id=attempt.id,
                      message=f"attempt {attempt.number}: instance {info.instance_id}, launched but never heard of, "
                              f"terminated and billed {attempt.billed_seconds:.0f} s")

    def _live_job_ids(self) -> list[int]:
        live = state_names(LIVE)
        with self.store.session() as session:
            if self.worker_id:
                now = self._claim_now(session)
                self._announce(session, now)
                return claims.claim_jobs(session, self.worker_id, now, self.settings.claim_ttl, live_states=live)
            return list(session.scalars(select(Job.id).where(Job.state.in_(live)).order_by(Job.id)))

    def _renew_claims(self) -> None:
        with self.store.session() as session:
            now = self._claim_now(session)
            self._announce(session, now)
            claims.renew(session, self.worker_id, now, self.settings.claim_ttl, live_states=state_names(LIVE))

    def _announce(self, session, now: float) -> None:
        """This worker's agents' API, for as long as its claims (`state.workers`): its jobs' agents go on reporting
        to whichever worker takes them over once it is gone. Renewed as its claims are (every third of their life),
        not at every tick: a write each tick would double the worker's idle writes."""
        ttl = self.settings.claim_ttl
        if self.settings.controller_url and now >= self._announced_until - 2 * ttl / 3:
            workers.announce(session, self.worker_id, self.settings.controller_url, now, ttl)
            self._announced_until = now + ttl

    def _claim_now(self, session) -> float:
        """The time claims are written and judged in: the database's on wall time (workers on several machines, whose
        clocks may disagree, share it: `state.db_clock`); the controller's own clock when it is a manual or simulated
        one, as every claim's time then is."""
        return database_now(session) if isinstance(self.clock, WallClock) else self.clock.now()

    def release_claims(self) -> None:
        if self.worker_id:
            with self.store.session() as session:
                claims.release_all(session, self.worker_id)
                workers.withdraw(session, self.worker_id)

    def billing_rule(self, cloud: str) -> BillingRule:
        return rule_for(cloud, self.settings.billing_rules)

    def provider(self, name: str) -> Provider:
        if name not in self._providers:
            self._providers[name] = self._provider_factory(name)
        return self._providers[name]

    def policy(self, spec: JobSpec) -> PlacementPolicy:
        options = {}
        if spec.spot.policy == "default":
            options = {"backoff_base": self.settings.backoff_base, "backoff_max": self.settings.backoff_max}
        return get_policy(spec.spot.policy, **options)


def _record_running(session, attempt: Attempt, at: float, message: str) -> None:
    """The job's move to RUNNING on its single attempt."""
    records.transition(session, attempt.job, JobState.RUNNING, at, f"{message} ({attempt.market} in {attempt.zone})",
                       running_on=[attempt])


def _as_recorded(attempt: Attempt) -> InstanceInfo:
    """The attempt's instance as the store knows it (the cloud's state is not known here)."""
    return InstanceInfo(
        instance_id=attempt.instance_id, zone=attempt.zone, market=attempt.market, instance_type=attempt.instance_type,
        state="unknown", launched_at=attempt.started_at, client_token=attempt.client_token,
    )


def _add_instance_row(session, attempt: Attempt, info: InstanceInfo, now: float) -> None:
    """The cloud's instance on record for ``attempt`` (once: a launch repeated by its token finds it there)."""
    if session.get(Instance, info.instance_id) is None:
        session.add(Instance(
            id=info.instance_id, provider=attempt.provider, attempt_id=attempt.id, zone=info.zone, market=info.market,
            instance_type=info.instance_type, address=info.address, state=info.state,
            launched_at=info.launched_at or now,
        ))
