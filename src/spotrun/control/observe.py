"""Detection: from what the agent reported and what the provider says, judge what happened to an attempt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotrun.control.states import JobState
from spotrun.providers import InstanceInfo
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job

if TYPE_CHECKING:
    from spotrun.control.controller import ControllerSettings


# Attempts that end so had their launch refused: the cloud started nothing for them, and charges nothing.
REFUSED_LAUNCHES = frozenset({"no_capacity", "price_too_low", "quota_exceeded", "launch_invalid"})


@dataclass(frozen=True)
class Verdict:
    """end_reason None means "running, as it should"; otherwise the attempt must end for that reason."""

    end_reason: str | None
    message: str
    job_failure: str | None = None
    start_failure: str | None = None  # why the instance could not start the agent, where that ended the attempt


def judge_attempt(
    job: Job,
    attempt: Attempt,
    info: InstanceInfo | None,
    now: float,
    settings: ControllerSettings,
    watching_since: float,
    stop_by: float | None = None,
) -> Verdict | None:
    """What to do about a placed attempt, or None when there is nothing to do this tick. `watching_since`: since when
    the attempt has been watched without a gap (`Controller.watched_since`): no timeout counts from before it.
    `stop_by`: for a node of a gang whose generation is stopping, the time its ranks were told they have (a noticed
    node's deadline)."""
    spec = JobSpec.stored(job.spec)
    if job.cancel_requested:
        return Verdict("cancelled", "cancelled by the user")
    if spec.spot.max_wait is not None and now - job.created_at > spec.spot.max_wait:
        failure = f"max_wait of {spec.spot.max_wait:.0f} s exceeded"
        return Verdict("cancelled", failure, job_failure=failure)
    if attempt.state == "draining":
        return _judge_draining(attempt, info, now, spec, stop_by)
    if attempt.reported_outcome:
        code = f" (exit code {attempt.exit_code})" if attempt.exit_code is not None else ""
        return Verdict(attempt.reported_outcome, f"the agent reported {attempt.reported_outcome}{code}")
    if info is None or info.state == "unknown":
        return _judge_unknown(attempt, now, settings, watching_since)
    if info.state == "terminated":
        if info.detail.get("refusal") in REFUSED_LAUNCHES:  # accepted, then never placed (Azure's late failures)
            refusal, reason = info.detail["refusal"], info.detail.get("reason", info.detail["refusal"])
            # retried, a launch no retry can mend fails alike forever: the job fails, saying why
            failure = f"the cloud cannot take this job's launch: {reason}" if refusal == "launch_invalid" else None
            return Verdict(refusal, f"the cloud could not place instance {info.instance_id}: {reason}", job_failure=failure)
        if info.reclaimed:
            return Verdict("preempted", f"the cloud reclaimed spot instance {info.instance_id}")
        if info.start_failure and attempt.agent_started_at is None:  # another instance would end alike
            return Verdict("failed", f"instance {info.instance_id} ended before its agent started: {info.start_failure}",
                           start_failure=info.start_failure)
        return Verdict("lost", f"instance {info.instance_id} vanished ({info.detail.get('reason', 'no reason given')})")
    return _judge_agent(job, attempt, info, now, settings, watching_since)


# The longest wait for capacity being brought up that the boot timeout does not count: cluster-autoscaler's
# --max-node-provision-time and Karpenter's registration TTL, after which they give the node up, are 15 minutes.
CAPACITY_WAIT_LIMIT = 900.0


def _judge_agent(
    job: Job, attempt: Attempt, info: InstanceInfo, now: float, settings: ControllerSettings,
    watching_since: float,
) -> Verdict | None:
    if attempt.agent_started_at is None:
        if now - max(_boot_began(attempt, info, now), watching_since) > settings.boot_timeout:
            if info.start_failure:  # counted against the job's restarts, not relaunched without end
                return Verdict("failed", f"instance {info.instance_id} could not start the agent: {info.start_failure}",
                               start_failure=info.start_failure)
            return Verdict("lost", f"the agent did not report in within {settings.boot_timeout:.0f} s of boot")
        return None
    # Heartbeats sent while this controller was down went nowhere: count silence from its start at the earliest.
    last_sign = max(attempt.last_heartbeat_at or 0.0, attempt.agent_started_at, watching_since)
    if now - last_sign > settings.heartbeat_timeout:
        return Verdict("lost", f"no heartbeat for {now - last_sign:.0f} s")
    if job.state != JobState.RUNNING:
        return Verdict(None, f"agent started on {attempt.instance_id}")
    return None


def _boot_began(attempt: Attempt, info: InstanceInfo, now: float) -> float:
    """When the instance began to boot: at its launch, or once the capacity brought up for it came, if later."""
    launched = attempt.started_at or now
    if info.boot_began_at is None:
        return launched
    return max(launched, min(info.boot_began_at, launched + CAPACITY_WAIT_LIMIT))


DRAIN_MARGIN = 15.0  # seconds beyond the trainer's grace for the agent to back up and report


def _judge_draining(
    attempt: Attempt, info: InstanceInfo | None, now: float, spec: JobSpec, stop_by: float | None
) -> Verdict | None:
    """An attempt the controller asked to stop so that the job can move: it ends as "migrated" once the agent
    reports (the trainer checkpointed), or when it overstays its grace (or `stop_by`, if later)."""
    if attempt.reported_outcome == "succeeded":  # the run was done as it stopped: nothing is left to move
        return Verdict("succeeded", f"the command finished as it stopped to move ({attempt.notice_source})")
    if attempt.reported_outcome:
        return Verdict("migrated", f"stopped to move ({attempt.notice_source}); the agent reported {attempt.reported_outcome}")
    if info is not None and info.state == "terminated":
        if info.reclaimed:  # as when its agent's report of the notice's stop comes first: the job had chosen to leave
            return Verdict("migrated", f"the cloud took instance {info.instance_id} back while it stopped to move")
        return Verdict("lost", f"instance {info.instance_id} went while stopping")
    if attempt.notice_at is not None and now > _drain_deadline(attempt, spec, stop_by):
        return Verdict("migrated", "the agent did not stop in time; terminating to move")
    return None


def _drain_deadline(attempt: Attempt, spec: JobSpec, stop_by: float | None) -> float:
    """When a draining attempt has overstayed: notice_grace after its stop or notice (or `stop_by`, if later), and
    the margin for its agent to report."""
    return max(attempt.notice_at + spec.spot.notice_grace, stop_by or 0.0) + DRAIN_MARGIN


def _judge_unknown(
    attempt: Attempt, now: float, settings: ControllerSettings, watching_since: float
) -> Verdict | None:
    """A failed probe says nothing; but an instance the cloud cannot describe AND whose agent has been silent
    for long (e.g. records the cloud has already forgotten) is lost, or the attempt would hang forever."""
    last_sign = max(attempt.last_heartbeat_at or 0.0, attempt.started_at or 0.0, watching_since)
    silent = now - last_sign
    if silent > max(settings.heartbeat_timeout, settings.unknown_timeout):
        return Verdict("lost", f"the cloud cannot describe the instance and its agent has been silent for {silent:.0f} s")
    return None
