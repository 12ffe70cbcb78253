"""The bodies of the team server's API that the CLI reads too: the read models of jobs, and the answers to a launch,
a cancel, a preemption and a cost; and the audit log's events with the filter the CLI sends for them (pydantic alone:
no database, no web framework).

The server builds them from the store's rows (`spotrun.server.views`), and so does the CLI in embedded mode; in remote
mode the CLI reads the server's answers into these same classes, so that both modes print the same thing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from spotrun.audit_kinds import AUDIT_KINDS, AuditKind
from spotrun.costs.ledger import JobBill
from spotrun.limits import DEFAULT_AUDIT_EVENTS, MAX_AUDIT_EVENTS, MAX_ID, MAX_PRICE_PER_HOUR

# an attempt's stored prices that no instance has (`ledger.priced`)
OVER_THE_CAP = (f"stored at over {MAX_PRICE_PER_HOUR:,.0f} $/h, a price no instance has (a job stored before prices "
                "were capped)")
UNPRICED = f"attempts left out of `cost`: {OVER_THE_CAP}, whose dollars would be infinite"

# The last line of a followed log stream (`GET /jobs/{id}/logs?follow=true`) that the server ended because the token
# that opened it was revoked: the CLI tells it from a stream that ended with its job
STREAM_REVOKED = "\n[spotrun: the token that opened this stream was revoked; it ends here]\n"

# The user whose token a job list or a job's detail answered (`GET /jobs`, `GET /jobs/{id}`): which jobs are the
# caller's own, so that `spotrun status` names the owners of an admin's list of another user's jobs without asking
# `/me` each time
CALLER_HEADER = "X-Spotrun-User"

MAX_SOURCE_CHARS = 1000  # a launch's `source` (the job file's name), at most: the CLI sends the name alone past it


class JobRow(BaseModel):
    """One line of `spotrun status`."""

    id: int
    name: str
    state: str
    attempts: int = Field(description="the attempts that got an instance: refused launch tries are not counted "
                          "(`spotrun status JOB` lists them, folded)")
    preemptions: int
    market: str | None = Field(description="where it runs now (spot, on-demand); null while it runs nowhere")
    zone: str | None
    elapsed: float = Field(description="seconds from its submission to its end, or to now")
    cost: float = Field(description="dollars charged so far, as `spotrun cost` counts them")
    checkpoint_step: int | None = Field(description="the steps of the newest checkpoint its trainer reported")
    failure_reason: str | None
    total_steps: int | None = None  # of the whole run, when the SDK was told (progress: checkpoint_step / total)
    unpriced_attempts: int = Field(default=0, description=UNPRICED)
    owner: str | None = Field(default=None, description="the user whose job it is (`local`: launched without a "
                              "server); null from a server older than this field")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()


# how an attempt that never got an instance ends: refused, launching failed, or a gang's node given back
UNPLACED_ENDS = frozenset({"no_capacity", "price_too_low", "quota_exceeded", "launch_invalid", "launch_error", "released"})


def ended_without_instance(placed: bool, end_reason: str | None, billed_seconds: float | None) -> bool:
    """A try that ended without an instance (refused, launching failed, or a gang's node given back) and cost
    nothing: what `no_instance` says of an attempt and of its end's event."""
    return not placed and end_reason in UNPLACED_ENDS and not billed_seconds


class AttemptView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    number: int
    state: str
    provider: str
    market: str
    zone: str
    instance_type: str
    instance_id: str | None
    created_at: float
    started_at: float | None
    agent_started_at: float | None
    notice_at: float | None
    reclaim_at: float | None = Field(
        default=None, description="when the cloud's preemption notice said it would take the instance; null: the "
        "notice named no time, or there was none")
    warned_at: float | None = Field(default=None, description="when the agent reported the first early warning")
    warning: str | None = Field(
        default=None, description='that warning, "<source>/<kind>": e.g. "aws-imds/rebalance" (EC2 recommends '
        "moving off this spot instance: it is at higher risk of interruption)")
    ended_at: float | None
    end_reason: str | None
    billed_seconds: float
    charged_seconds: float | None = Field(
        default=None, description="what the cloud charges for the seconds held (its minimum; AWS charges nothing "
        "for a spot instance it reclaims in its first hour); null: as billed, or not ended yet")
    price_per_hour: float
    on_demand_price_per_hour: float
    cost: float | None = Field(
        default=0.0, description="dollars, as the ledger bills the attempt at the time of the response: the seconds "
        "charged once it ended (held so far while it runs), each at the price of its time (a spot price that moved "
        "while it ran is followed); null: " + OVER_THE_CAP + ", left out of the job's bill")
    left_to_cloud_until: float | None = Field(
        default=None, description="the instance, interrupted, is left for the cloud to take back, which makes it "
        "free (AWS, in its first hour); spotrun terminates it at this time if the cloud has not, and it is then "
        "charged to this time. Until one or the other, `cost` is provisional. null: nothing pending")
    checkpoint_step: int | None
    log_bytes: int
    log_pruned_at: float | None = Field(
        default=None, description="when log retention (`spotrun prune-logs`, or a server's --keep-logs) removed the "
        "attempt's log (its size stays in log_bytes); null: the log is whole")
    total_steps: int | None = None
    node_rank: int = 0
    address: str | None = None
    takes_over_from: int | None = Field(default=None, description="a make-before-break move: the attempt number it replaces")

    @computed_field(description="a try that ended without an instance (refused, launching failed, or a gang's node "
                    "given back) and cost nothing: runs of them are shown as one row")  # type: ignore[prop-decorator]
    @property
    def no_instance(self) -> bool:
        return self.ended_at is not None and ended_without_instance(
            self.started_at is not None, self.end_reason, self.billed_seconds)


class EventView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: float
    kind: str
    message: str
    attempt_id: int | None
    data: dict[str, Any] | None = Field(
        default=None, description='what the message says, as fields: e.g. a state move\'s "from" and "to", an ended '
        'attempt\'s "reason", "market", "zone" and whether it was "placed" (got an instance)')

    @computed_field(description="the end of a try that got no instance and cost nothing (an attempt_ended event whose "
                    "attempt is `no_instance`; its data says whether it was `placed`): a run of them is folded for "
                    "reading")  # type: ignore[prop-decorator]
    @property
    def no_instance(self) -> bool:
        data = self.data or {}
        return self.kind == "attempt_ended" and ended_without_instance(
            data.get("placed", False), data.get("reason"), data.get("billed_seconds"))


class BillView(BaseModel):
    spot_seconds: float
    on_demand_seconds: float
    cost: float
    on_demand_cost: float
    seconds: float
    saved: float = Field(description="`on_demand_cost` less `cost`: what spot's prices spared against the same "
                         "instance-seconds on-demand. A job that ended without a result (FAILED, CANCELLED) saved "
                         "nothing: its whole `cost` bought no result")
    saved_fraction: float = Field(description="`saved` over `on_demand_cost` (0 when that is 0)")
    unpriced_attempts: int = Field(default=0, description=UNPRICED.replace("`cost`", "every amount here"))
    provisional: float = Field(
        default=0.0, description="dollars of `cost` charged for instances left for the cloud to take back: free if "
        "it does by `provisional_until`, charged to that time if not")
    provisional_until: float | None = Field(default=None, description="when the last of those is settled")

    @classmethod
    def of(cls, job_bill: JobBill) -> BillView:
        return cls(**job_bill.to_json())

    def to_bill(self) -> JobBill:
        return JobBill(
            self.spot_seconds, self.on_demand_seconds, self.cost, self.on_demand_cost, self.unpriced_attempts)


class NotifyView(BaseModel):
    """Where and of what the job's owner is told (spec `notify`)."""

    webhook: str  # its scheme and host only: the rest of a webhook URL (a Slack one's path) is its secret
    events: list[str]


class JobDetail(BaseModel):
    """A job with its attempts and its bill so far."""

    job: JobRow
    owner: str
    attempts: list[AttemptView]
    bill: BillView
    checkpoint_store: str | None = None  # where the job's checkpoints are kept (resolved when it was submitted)
    stuck: str | None = None  # why the controller cannot go on with the job, while that is its newest event
    notify: NotifyView | None = None


class Launched(BaseModel):
    id: int
    name: str
    owner: str


class SpecProblem(BaseModel):
    field: str
    message: str
    line: int | None


class InvalidSpec(BaseModel):
    detail: str = Field(description='what kind of refusal: "invalid job file" (its problems), or "job refused by this '
                        "server's settings\" (a job on the local cloud that SPOTRUN_SERVER_LOCAL_CLOUD does not allow "
                        'the caller)')
    source: str
    problems: list[SpecProblem]


class CancelAccepted(BaseModel):
    job_id: int
    cancel_requested: bool


class PreemptAccepted(BaseModel):
    job_id: int
    instance_id: str
    attempt_number: int


class JobCost(BaseModel):
    job_id: int
    name: str
    state: str
    bill: BillView


MAX_ACTOR_CHARS = 500  # a user's name (200) or the CLI's `cli:<OS user>@<host>`


class AuditFilter(BaseModel):
    """Which audit events to read, newest first: `GET /api/v1/audit`'s query, and what `spotrun audit` asks the store
    or the server for. A parameter it does not know is refused (422 naming it), not ignored: a misspelt filter showed
    every event as if it had been applied."""

    model_config = ConfigDict(extra="forbid")

    user: str | None = Field(
        default=None, min_length=1, max_length=MAX_ACTOR_CHARS,
        description="only the events about this user or made by them (the actor, as the events name it: a user, or "
        "`cli:<OS user>@<host>` for the CLI acting on the store); in any case",
    )
    kind: list[AuditKind] = Field(default_factory=list, description="only the events of these kinds (repeat it)")
    since: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description="only the events at or after this time (unix seconds)")
    before_id: int | None = Field(
        default=None, ge=1, le=MAX_ID,
        description="only the events older than this id: the next page, with the previous page's `next_before_id`",
    )
    limit: int = Field(default=DEFAULT_AUDIT_EVENTS, ge=1, le=MAX_AUDIT_EVENTS, description="at most this many events")

    @field_validator("user")
    @classmethod
    def _no_nul(cls, user: str | None) -> str | None:
        if user is not None and "\0" in user:  # no name the store keeps holds one (PostgreSQL's text cannot)
            raise ValueError("holds a NUL character (\\0), which no user or actor name holds")
        return user


class AuditEvent(BaseModel):
    """A change to users or tokens: who made it (`actor`), to whom (`user`), and the tokens it concerned by their
    public prefixes only; never a token nor its hash."""

    id: int
    at: float
    kind: str = Field(description=f"one of {', '.join(AUDIT_KINDS)}")
    actor: str = Field(description="who made the change: a user signed in to the server, or `cli:<OS user>@<host>` "
                       "for the CLI acting on the store directly (the OS account it ran as, on that machine)")
    user: str = Field(description="the user whose account or token changed")
    token_prefix: str | None = Field(default=None, description="the token made or revoked, by its public prefix")
    revoked_tokens: list[str] = Field(
        default_factory=list, description="user_disabled: the prefixes of the live tokens it revoked")
    message: str


class AuditPage(BaseModel):
    events: list[AuditEvent] = Field(description="newest first")
    next_before_id: int | None = Field(
        description="older events match too: ask again with `before_id` set to this; null: none does")
