"""The store's tables: jobs, attempts, instances, events, the controller lease and settings.

Times are UNIX seconds (float) so that the controller can run on an injected clock.
The store holds no business rules: which transitions are allowed lives in `spotrun.control`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, LargeBinary, MetaData, String, Text, UniqueConstraint,
    false, text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from spotrun.limits import MAX_ID as MAX_ID  # ids are 32-bit integers in PostgreSQL

# Every constraint gets a predictable name: SQLite batch migrations can only drop or alter named ones.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # the few jobs with notifications still to settle, which the controller reads at every tick
        Index("ix_jobs_notifying", "id", postgresql_where=text("notified_event_id IS NOT NULL"),
              sqlite_where=text("notified_event_id IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str] = mapped_column(String(200), default="local")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(20), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Absolute time after which the controller may try to place the job again (backoff). Kept once the wait is
    # over: the tries made since are the current round of them (`PlacementContext.waited_until`).
    not_before: Mapped[float | None] = mapped_column(Float, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    restarts_on_error: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Consecutive placement rounds that found no capacity anywhere (drives backoff).
    capacity_rounds: Mapped[int] = mapped_column(Integer, default=0)
    # Which controller worker drives the job, until when (see spotrun.state.claims).
    claimed_by: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)
    claim_expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The wait until `not_before` is the policy's wait for spot, not a backoff after a quota or launch error: another
    # job of its market getting spot, or freeing a spot instance, ends it early (spotrun.control.spot_news).
    waits_for_spot: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The cursor of the job's notifications (spec `notify`, spotrun.control.notifier): the id of the newest event of
    # the job they are settled up to (told, given up, or nothing to tell). 0 from the submit of a job with `notify`;
    # NULL for a job without, and once an ended job's are all settled.
    notified_event_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # When a post of the job's next notification (the first past its cursor) first failed, on the controller's clock:
    # the notifier gives it up once failing this long, however often it restarted or whichever worker tries. NULL
    # while none has failed; the cursor's every move sets it back to NULL.
    notify_failing_since: Mapped[float | None] = mapped_column(Float, nullable=True)

    attempts: Mapped[list[Attempt]] = relationship(
        back_populates="job", order_by="Attempt.number", cascade="all, delete-orphan"
    )
    # The attempts that got an instance, for what is read often (the job's row, progress, bill): a job waiting for
    # spot for days has thousands of refused tries, which cost nothing and report nothing.
    placed_attempts: Mapped[list[Attempt]] = relationship(
        primaryjoin="and_(Job.id == Attempt.job_id, Attempt.started_at.is_not(None))",
        order_by="Attempt.number", viewonly=True,
    )


class Attempt(Base):
    """One placement of a job on one instance (or one try at getting one)."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("job_id", "number", name="uq_attempt_job_number"),
        # the market's history (every job's tries of one instance type), which placement policies learn from
        Index("ix_attempts_market", "provider", "instance_type", "created_at"),
        # open attempts, a small share of a store that keeps every attempt: the controller's per-tick reads and the
        # sweep for attempts left open on ended jobs
        Index("ix_attempts_open", "job_id", postgresql_where=text("ended_at IS NULL"),
              sqlite_where=text("ended_at IS NULL")),
        # the attempts that had an early warning, a small share of them: /metrics counts them at every scrape
        Index("ix_attempts_warned", "warning", "end_reason", postgresql_where=text("warned_at IS NOT NULL"),
              sqlite_where=text("warned_at IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    # launching -> running -> [draining ->] ending -> ended ; launching -> ended (no capacity / launch error)
    state: Mapped[str] = mapped_column(String(20), index=True)
    provider: Mapped[str] = mapped_column(String(40))
    zone: Mapped[str] = mapped_column(String(80))
    market: Mapped[str] = mapped_column(String(20))  # spot | on-demand
    instance_type: Mapped[str] = mapped_column(String(80))
    # GPUs attached apart from the machine type (GCE), e.g. "nvidia-tesla-v100x1": part of the market
    # (`control.placement.market_gpus`); None: none, or the type carries them
    gpus: Mapped[str | None] = mapped_column(String(200), nullable=True)
    price_per_hour: Mapped[float] = mapped_column(Float)
    on_demand_price_per_hour: Mapped[float] = mapped_column(Float)
    max_price: Mapped[float | None] = mapped_column(Float, nullable=True)
    client_token: Mapped[str] = mapped_column(String(80), unique=True)
    token_hash: Mapped[str] = mapped_column(String(128))
    instance_id: Mapped[str | None] = mapped_column(String(120), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # instance acquired
    agent_started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    notice_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    notice_source: Mapped[str | None] = mapped_column(String(60), nullable=True)
    # when the cloud's notice said it would take the instance (EC2's instance-action time, Azure's NotBefore, 30 s
    # after GCE's preempted flag); None: the notice named no time, or it was not the cloud's
    reclaim_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the first early warning the agent reported (an announcement that is not a preemption: EC2's rebalance
    # recommendation, a GCE live migration, an Azure reboot), when, and what: "<source>/<kind>"
    warned_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    warning: Mapped[str | None] = mapped_column(String(130), nullable=True)
    reported_outcome: Mapped[str | None] = mapped_column(String(20), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    total_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)  # of the whole run, as the SDK wrote it
    # The step rate: the first checkpoint the attempt reported (its step, when) and when the newest was first reported
    first_checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    first_checkpoint_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    checkpoint_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the longest time between two new checkpoints this attempt reported: what a preemption without notice may lose
    longest_save_gap: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # succeeded | failed | preempted | cancelled | lost | no_capacity | launch_error
    end_reason: Mapped[str | None] = mapped_column(String(20), nullable=True)
    billed_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # held: from the instance's start to its end
    # what the cloud charges for those seconds (`costs.billing`: minimums, a spot interruption free in the first
    # hour); None: the same as held (attempts billed before the rules were applied)
    charged_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    # A spot attempt whose zone's price moved while it ran (`control.repricing`): the seconds it held at the earlier
    # prices and their dollars; `price_per_hour` is the price since. Both 0: one price throughout.
    earlier_price_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    earlier_price_dollars: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    log_bytes: Mapped[int] = mapped_column(BigInteger, default=0)  # a log may pass 2 GiB
    log_pruned_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # the log removed (control.log_retention)
    # Multi-node jobs: which node slot this attempt's instance fills, where its agent can be reached (and the
    # free port it offers for the rendezvous when it is the master), and the last generation its command ran.
    node_rank: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    address: Mapped[str | None] = mapped_column(String(120), nullable=True)
    rendezvous_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    generation_done: Mapped[int | None] = mapped_column(Integer, nullable=True)
    generation_exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # A make-before-break move: the attempt (of the same job) this one takes over from. Its instance is launched
    # while that attempt still runs, and its agent holds, restoring nothing, until that attempt has ended.
    standby_for: Mapped[int | None] = mapped_column(Integer, nullable=True)

    job: Mapped[Job] = relationship(back_populates="attempts")


class Generation(Base):
    """One start of all the ranks of a multi-node job together: who is in it, who is master, how it ended.

    A generation ends when any member is lost or fails, or when all have finished; the next one starts once every
    node slot is filled again (only the lost nodes are replaced)."""

    __tablename__ = "generations"
    __table_args__ = (UniqueConstraint("job_id", "number", name="uq_generation_job_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20))  # running | stopping | ended
    # node rank (as a string: JSON keys) -> attempt id
    members: Mapped[dict[str, int]] = mapped_column(JSON)
    master_addr: Mapped[str] = mapped_column(String(120))
    master_port: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    stop_requested_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # succeeded | interrupted (a member was lost or preempted) | stopped | moved (asked to, by the policy) | failed
    end_reason: Mapped[str | None] = mapped_column(String(20), nullable=True)


class Instance(Base):
    """What the controller knows of an instance it launched (the provider has its own records)."""

    __tablename__ = "instances"
    __table_args__ = (
        # the few instances left for the cloud to take back, which every tick settles, out of every one ever launched
        Index("ix_instances_awaiting_reclaim", "id", postgresql_where=text("state = 'awaiting_reclaim'"),
              sqlite_where=text("state = 'awaiting_reclaim'")),
    )

    id: Mapped[str] = mapped_column(String(120), primary_key=True)
    provider: Mapped[str] = mapped_column(String(40))
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"), index=True)
    zone: Mapped[str] = mapped_column(String(80))
    market: Mapped[str] = mapped_column(String(20))
    instance_type: Mapped[str] = mapped_column(String(80))
    address: Mapped[str | None] = mapped_column(String(120), nullable=True)
    # pending | running | terminating | awaiting_reclaim | terminated
    state: Mapped[str] = mapped_column(String(20))
    launched_at: Mapped[float] = mapped_column(Float)
    terminated_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    reclaimed: Mapped[bool] = mapped_column(Boolean, default=False)
    # awaiting_reclaim: an interrupted spot instance left for the cloud to take back (free in its first hour on
    # AWS); spotrun terminates it itself at this time if the cloud has not
    release_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Event(Base):
    """Append-only log of every transition and every side effect the controller took."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True, nullable=True)
    attempt_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    kind: Mapped[str] = mapped_column(String(40))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class LogChunk(Base):
    """A piece of an attempt's output as its agent sent it, at its byte offset in the attempt's log. Logs live in the
    store, so that every server on one store serves the same logs (files on each server's disk did not)."""

    __tablename__ = "log_chunks"

    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"), primary_key=True)
    start: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # its first byte's offset in the log
    data: Mapped[bytes] = mapped_column(LargeBinary)


class ControllerLease(Base):
    """Which controller process may drive jobs; taken by compare-and-set, renewed every tick."""

    __tablename__ = "controller_lease"

    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(200), nullable=True)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    url: Mapped[str | None] = mapped_column(String(200), nullable=True)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)
    acquired_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class ControllerWorker(Base):
    """A controller worker's agents' API, where any agent may report (`state.workers`): every worker serves the same
    store, so an agent whose worker is gone goes on reporting to another."""

    __tablename__ = "controller_workers"

    worker: Mapped[str] = mapped_column(String(200), primary_key=True)  # its claims' holder (`state.claims`)
    agent_url: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[float] = mapped_column(Float, index=True)  # the database's time, as its claims'


class Setting(Base):
    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(80), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)


class User(Base):
    """Someone who may use the team server's API; an admin sees and acts on every user's jobs. A disabled user (one
    who left the team) is kept, with their jobs, but holds no live token and is given none."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    disabled_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user", cascade="all, delete-orphan")


class ApiToken(Base):
    """A user's API token: only its SHA-256 is kept; `prefix` is the public part used to find the row."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    token_hash: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    user: Mapped[User] = relationship(back_populates="tokens")
