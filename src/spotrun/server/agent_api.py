"""The HTTP API agents on instances report to. Each request carries the one attempt's token."""

from __future__ import annotations

from typing import Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from spotrun.control import gang, records
from spotrun.control.boot import job_part
from spotrun.control.clock import Clock, WallClock
from spotrun.control.heard import HeardAgents
from spotrun.control.logs import LogGap, append_chunk
from spotrun.control.progress import record_checkpoint, restored_step
from spotrun.control.reclaims import CLOUD_NOTICE_SOURCES
from spotrun.control.rebalance import AT_RISK_WARNINGS
from spotrun.server.early_auth import AGENT_REFUSAL, AuthBeforeBody, attempt_holds
from spotrun.server.refusals import answer_invalid_requests
from spotrun.server.schemas import REQUEST_BODY
from spotrun.server.stored_text import StoredText
from spotrun.server.store_outages import StoreOutages
from spotrun.server.strict_json import StrictJsonRoute
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Event, Store, add_event, workers
from spotrun.state.db_clock import database_now
from spotrun.ttl_cache import TtlCache


class Started(BaseModel):
    address: StoredText | None = Field(default=None, max_length=120)
    port: int | None = Field(default=None, ge=1, le=65535, description="a free port for a multi-node rendezvous")


class Heartbeat(BaseModel):
    model_config = REQUEST_BODY  # the agent sends these two fields alone, as whole numbers
    checkpoint_step: int | None = Field(default=None, ge=0, le=2**31 - 1, description="steps done by the newest checkpoint")
    total_steps: int | None = Field(
        default=None, ge=1, le=2**31 - 1,
        description="steps of the whole run, if the SDK knows; one below checkpoint_step is not kept",
    )

    @model_validator(mode="after")
    def _no_total_below_the_step(self) -> Heartbeat:
        """A total below the checkpoint's step is a wrong `Checkpointer(total_steps=...)`: it is dropped (progress is
        then unknown, not past 100%), as the agent itself drops it, and the heartbeat kept. Refused, each heartbeat
        would go unheard, and the controller would take the agent for lost and end the training over a progress
        figure."""
        if self.total_steps is not None and self.total_steps < (self.checkpoint_step or 0):
            self.total_steps = None
        return self


class Notice(BaseModel):
    source: StoredText = Field(max_length=60)
    deadline: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                   description="unix seconds when the cloud said it will take the instance")
    detail: StoredText = ""


class EarlyWarningReport(BaseModel):
    source: StoredText = Field(min_length=1, max_length=60)
    kind: StoredText = Field(default="", max_length=60)
    detail: StoredText = ""
    at: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="unix seconds the cloud gave for it")


class SlowSaveReport(BaseModel):
    checkpoint_step: int = Field(ge=0, le=2**31 - 1)
    save_seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False, description="None: the save was not timed")
    upload_seconds: float = Field(ge=0, allow_inf_nan=False)
    budget_seconds: float = Field(gt=0, allow_inf_nan=False, description="what a notice leaves for both")
    notice: StoredText = Field(min_length=1, max_length=80)


class LogChunk(BaseModel):
    offset: int = Field(ge=0)
    data: str


class GenerationExit(BaseModel):
    generation: int = Field(ge=1, le=2**31 - 1)
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)


class Exit(BaseModel):
    outcome: Literal["succeeded", "failed", "preempted"]
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)  # the column is 32-bit
    checkpoint_synced: bool = False
    nothing_to_back_up: bool = Field(
        default=False, description="the instance held no checkpoint (nor user file): the exit says nothing of a backup",
    )


JOB_PART_SERVED = "job_part_served"
LATE_NOTICE = "late_preemption_notice"
# How long after its attempt ended an agent's token is still taken: its last reports (the log's tail, the exit) may
# arrive after the controller ended the attempt. Past it, the token is refused: it is in the instance's user data,
# which the cloud keeps showing after the instance is gone. A heartbeat is always answered, with a stop.
ENDED_ATTEMPT_GRACE = 600.0


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def hand_out_job_part(session: Session, attempt_id: int, client: str | None, now: float) -> dict:
    """The job's part for its attempt's agent (410 once it started or ended), recorded as an event naming who asked,
    so that a second handout (an agent whose answer was lost, or someone else holding the token) shows."""
    attempt = session.get(Attempt, attempt_id, with_for_update=True)  # PostgreSQL: handouts of one attempt in turn
    if attempt.ended_at is not None:
        raise HTTPException(status_code=410, detail=f"attempt {attempt.number} of job {attempt.job_id} has ended")
    if attempt.agent_started_at is not None:
        raise HTTPException(
            status_code=410,
            detail=f"attempt {attempt.number} of job {attempt.job_id}: its agent started already, and the job's part "
            "of the configuration is handed out only before that",
        )
    part = job_part(JobSpec.stored(attempt.job.spec))
    event = add_event(session, at=now, kind=JOB_PART_SERVED, job_id=attempt.job_id, attempt_id=attempt.id, message="")
    session.flush()  # SQLite: the insert takes the write lock first, so a handout at the same moment is counted
    earlier = session.scalars(
        select(Event).where(Event.job_id == attempt.job_id, Event.attempt_id == attempt.id,
                            Event.kind == JOB_PART_SERVED, Event.id < event.id).order_by(Event.id)
    ).all()
    who = client or "an unknown address"
    event.message = f"attempt {attempt.number}: the job's configuration was handed to {who}"
    if earlier:
        first = earlier[0].data.get("client") or "an unknown address"
        event.message += (
            f", for the {ordinal(len(earlier) + 1)} time (first to {first}): an agent whose answer was lost asks "
            "again, but so could anyone else holding the attempt's token"
        )
    event.data = {"client": client, "handout": len(earlier) + 1}
    return part


def record_late_notice(session: Session, attempt: Attempt, notice: Notice, now: float) -> None:
    """A preemption notice for an attempt that has ended: an event, once, and nothing of the attempt changed. As its
    notice, it came after its end, and the recovery measured from it (`fleet_totals.recoveries`) was shorter than it
    was; whether its instance is left to the cloud was decided as it ended (`control.reclaims`)."""
    told = session.scalar(select(Event.id).where(Event.attempt_id == attempt.id, Event.kind == LATE_NOTICE))
    if told is None:
        add_event(
            session, at=now, kind=LATE_NOTICE, job_id=attempt.job_id, attempt_id=attempt.id,
            message=f"attempt {attempt.number}: preemption notice from {notice.source} {now - attempt.ended_at:.0f} s "
            "after the attempt ended; not kept as its notice",
            data={"source": notice.source, "deadline": notice.deadline, "detail": notice.detail[:500]},
        )


def stopped_by_its_ending(attempt: Attempt, source: str) -> bool:
    """A notice that is the controller's own doing: the attempt is ending (its gang succeeded, the job was cancelled)
    and its instance being terminated gave the agent a SIGTERM. Told as a preemption notice, every node of a gang
    that had just succeeded read as preempted. A cloud's notice is still the attempt's: it says whether its instance
    is left to the cloud (`control.reclaims`)."""
    return attempt.state == "ending" and source not in CLOUD_NOTICE_SOURCES


def exit_message(attempt: Attempt, body: Exit) -> str:
    backup = backup_words(body)
    code = "" if body.exit_code is None else f" (exit code {body.exit_code})"  # None: the command left no exit code
    # the controller's end (a cancel, the gang done) stopped it: a command killed by the signal did not fail
    stopped = body.outcome == "preempted" or (body.exit_code is not None and body.exit_code < 0)
    if stopped and attempt.state == "ending" and attempt.notice_at is None:
        return f"attempt {attempt.number}: agent stopped as the attempt ended{code}{backup}"
    return f"attempt {attempt.number}: command {body.outcome}{code}{backup}"


def backup_words(body: Exit) -> str:
    """What the exit says of the final backup: nothing where there was nothing to back up (a job that saves no
    checkpoints, a gang's node, whose ranks write to the store themselves)."""
    if body.nothing_to_back_up:
        return ""
    return "; checkpoints backed up" if body.checkpoint_synced else "; checkpoints NOT backed up"


# how long a heartbeat's answer may name workers as they were: each attempt beats every few seconds
WORKERS_KEPT_SECONDS = 2.0
# how long a heartbeat's write waits for SQLite's write lock: the next heartbeat comes in seconds, and one waiting out
# a stalled writer's lock held a server thread; enough of them held every thread, and no heartbeat was heard at all
HEARTBEAT_PATIENCE = 2.0


def create_agent_app(store: Store, clock: Clock | None = None, heard: HeardAgents | None = None) -> FastAPI:
    """`heard`: where each report an agent makes (a heartbeat, its exit, ...) is noted before anything is written,
    for the controller of this process (`control.heard`), which then does not take the attempt for lost should the
    store be slow or fail to record it."""
    clock = clock or WallClock()
    heard = heard if heard is not None else HeardAgents(clock.now)
    live_workers: TtlCache[list[str]] = TtlCache(WORKERS_KEPT_SECONDS, clock.now)

    def agent_urls(session: Session) -> list[str]:
        """The live workers' agents' APIs (`state.workers`), in the time their announcements are written in."""
        now = database_now(session) if isinstance(clock, WallClock) else clock.now()
        return live_workers.get("urls", lambda: workers.agent_urls(session, now))
    app = FastAPI(title="spotrun agent API", version="1")
    app.router.route_class = StrictJsonRoute
    answer_invalid_requests(app)
    app.add_middleware(AuthBeforeBody, store=store)
    app.add_middleware(StoreOutages)

    def token_holders_attempt(
        request: Request, attempt_id: int = PathParam(ge=1, le=2**31 - 1), authorization: str = Header(default="")
    ) -> int:
        verified = getattr(request.state, "verified_attempt", None) == attempt_id  # before the body (early_auth)
        if not verified and not attempt_holds(store, attempt_id, authorization):
            raise HTTPException(status_code=403, detail=AGENT_REFUSAL)
        heard.heard(attempt_id)  # a sign of life before any write, which a stalled store may hold up (control.heard)
        return attempt_id

    def attempt_still_reporting(attempt_id: int = Depends(token_holders_attempt)) -> int:
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            ended_at, number, job_id = attempt.ended_at, attempt.number, attempt.job_id
        if ended_at is not None and clock.now() - ended_at > ENDED_ATTEMPT_GRACE:
            raise HTTPException(status_code=410, detail=f"attempt {number} of job {job_id} has ended")
        return attempt_id

    Authorized = Depends(attempt_still_reporting)
    TokenHolder = Depends(token_holders_attempt)

    @app.get("/agent/v1/attempts/{attempt_id}/job")
    def job(request: Request, attempt_id: int = Authorized) -> dict:
        """The job's part of the agent's configuration, kept out of the user data the cloud shows (control.boot).
        Served only until the agent reports started: whoever reads the user data later gets nothing from it."""
        with store.session() as session:
            return hand_out_job_part(session, attempt_id, request.client.host if request.client else None, clock.now())

    @app.post("/agent/v1/attempts/{attempt_id}/started")
    def started(body: Started, attempt_id: int = Authorized) -> dict:
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            if attempt.ended_at is not None:  # as the job's part: nothing starts on an ended attempt
                raise HTTPException(status_code=410, detail=f"attempt {attempt.number} of job {attempt.job_id} has ended")
            if attempt.agent_started_at is None:
                attempt.address = body.address
                attempt.rendezvous_port = body.port
                attempt.agent_started_at = clock.now()
                attempt.last_heartbeat_at = attempt.agent_started_at
                add_event(
                    session, at=attempt.agent_started_at, kind="agent_started", job_id=attempt.job_id,
                    attempt_id=attempt_id, message=f"attempt {attempt.number}: agent started on {attempt.instance_id}",
                )
        return {"ok": True}

    @app.post("/agent/v1/attempts/{attempt_id}/heartbeat")
    def heartbeat(body: Heartbeat, attempt_id: int = TokenHolder) -> dict:
        with store.session(patience=HEARTBEAT_PATIENCE) as session:
            attempt = session.get(Attempt, attempt_id)
            if attempt.ended_at is not None:
                # an agent the controller gave up on (lost, then heard again): told to stop, a standby not released
                # (it would restore for nothing); nothing it says is kept
                return {"ok": True, "stop": f"attempt {attempt.number} has ended", "hold": True}
            attempt.last_heartbeat_at = clock.now()
            if body.checkpoint_step is not None:
                restored = restored_step(session, attempt) if attempt.first_checkpoint_step is None else None
                record_checkpoint(attempt, body.checkpoint_step, body.total_steps, attempt.last_heartbeat_at, restored)
            stop = attempt.notice_source if attempt.state == "draining" else None
            # a standby's agent holds until the attempt it takes over from has ended (spotrun.control.moves)
            reply = {"ok": True, "stop": stop, "hold": records.is_held(session, attempt),
                     "controllers": agent_urls(session)}
            if (attempt.job.spec.get("resources") or {}).get("nodes", 1) > 1:
                reply["gang"] = gang.assignment(session, attempt)
            return reply

    @app.post("/agent/v1/attempts/{attempt_id}/generation_exit")
    def generation_exit(body: GenerationExit, attempt_id: int = Authorized) -> dict:
        """A node's command of one generation of a multi-node job has exited (the node itself stays)."""
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            if (attempt.generation_done or 0) < body.generation:
                attempt.generation_done = body.generation
                attempt.generation_exit_code = body.exit_code
                add_event(
                    session, at=clock.now(), kind="generation_exit", job_id=attempt.job_id, attempt_id=attempt_id,
                    message=f"node {attempt.node_rank}: generation {body.generation} exited with code {body.exit_code}",
                )
        return {"ok": True}

    @app.post("/agent/v1/attempts/{attempt_id}/notice")
    def notice(body: Notice, attempt_id: int = Authorized) -> dict:
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            if attempt.ended_at is not None:
                record_late_notice(session, attempt, body, clock.now())
                return {"ok": True}
            if stopped_by_its_ending(attempt, body.source):
                return {"ok": True}
            # The first notice, or the cloud's after the agent's own (a SIGTERM) or the controller's stop to move:
            # what the cloud said decides whether its instance is left to it (`control.reclaims`).
            overtaken = attempt.notice_source not in CLOUD_NOTICE_SOURCES and body.source in CLOUD_NOTICE_SOURCES
            if attempt.notice_at is None or overtaken:
                attempt.notice_at = clock.now()
                attempt.notice_source = body.source
                attempt.reclaim_at = body.deadline
                left = f", {body.deadline - attempt.notice_at:.0f} s left" if body.deadline else ""
                add_event(
                    session, at=attempt.notice_at, kind="preemption_notice", job_id=attempt.job_id,
                    attempt_id=attempt_id, message=f"attempt {attempt.number}: preemption notice from {body.source}{left}",
                    data={"deadline": body.deadline, "detail": body.detail[:500]},
                )
        return {"ok": True}

    @app.post("/agent/v1/attempts/{attempt_id}/warning")
    def warning(body: EarlyWarningReport, attempt_id: int = Authorized) -> dict:
        """An announcement that is not a preemption; each is an event, and the attempt keeps the first (or the first
        of spot risk, which a move may act on: `control.rebalance`)."""
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            now = clock.now()
            warning = f"{body.source}/{body.kind}"
            at_risk = warning in AT_RISK_WARNINGS and attempt.warning not in AT_RISK_WARNINGS
            if attempt.warned_at is None or at_risk:
                attempt.warned_at, attempt.warning = now, warning
            add_event(
                session, at=now, kind="early_warning", job_id=attempt.job_id, attempt_id=attempt_id,
                message=f"attempt {attempt.number}: early warning from {body.source} (not a preemption notice): "
                f"{body.detail[:300]}",
                data={"source": body.source, "kind": body.kind, "at": body.at, "detail": body.detail[:500]},
            )
        return {"ok": True}

    @app.post("/agent/v1/attempts/{attempt_id}/slow_save")
    def slow_save(body: SlowSaveReport, attempt_id: int = Authorized) -> dict:
        """A checkpoint took longer to save and back up than a preemption notice leaves: an event, once per attempt
        (the agent sends one; a repeated delivery adds nothing)."""
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            told = session.scalar(select(Event.id).where(Event.attempt_id == attempt_id, Event.kind == "slow_save"))
            if told is None:
                saved = f"{body.save_seconds:.1f} s to save and " if body.save_seconds is not None else ""
                add_event(
                    session, at=clock.now(), kind="slow_save", job_id=attempt.job_id, attempt_id=attempt_id,
                    message=f"attempt {attempt.number}: checkpoint {body.checkpoint_step} took {saved}"
                    f"{body.upload_seconds:.1f} s to back up, more than the {body.budget_seconds:.0f} s a "
                    f"{body.notice} leaves: a preemption would resume from an older checkpoint (save less per rank, "
                    "e.g. shard the model, or use a faster store)",
                    data=body.model_dump(),
                )
        return {"ok": True}

    @app.post("/agent/v1/attempts/{attempt_id}/logs")
    def logs(body: LogChunk, attempt_id: int = Authorized) -> dict:
        try:
            with store.session() as session:
                size = append_chunk(session, attempt_id, body.offset, body.data.encode())
        except LogGap as gap:
            raise HTTPException(status_code=409, detail=str(gap)) from None
        return {"ok": True, "size": size}

    @app.post("/agent/v1/attempts/{attempt_id}/exit")
    def exit_(body: Exit, attempt_id: int = Authorized) -> dict:
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            if attempt.reported_outcome is None:
                attempt.reported_outcome = body.outcome
                attempt.exit_code = body.exit_code
                add_event(session, at=clock.now(), kind="agent_exit", job_id=attempt.job_id, attempt_id=attempt_id,
                          message=exit_message(attempt, body))
        return {"ok": True}

    return app
