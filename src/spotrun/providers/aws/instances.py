"""Reading EC2's description of an instance as the provider interface's InstanceInfo."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from spotrun.providers.base import InstanceInfo, InstanceState

TOKEN_TAG = "spotrun:client-token"
JOB_TAG = "spotrun:job"

# stopping/stopped: the job's process is gone (spotrun launches spot with interruption behaviour
# "terminate", so only a person stops one); the controller ends the attempt and terminates the instance.
_STATES: dict[str, InstanceState] = {
    "pending": "pending",
    "running": "running",
    "shutting-down": "terminated",
    "terminated": "terminated",
    "stopping": "terminated",
    "stopped": "terminated",
}
SPOT_RECLAIM_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
# StateReason codes of an instance EC2 accepted, then ended before placing it (EC2's API reference, StateReason):
# the launch's refusal, as `InstanceInfo.detail["refusal"]` names it; nothing ran, nothing is charged.
LATE_REFUSAL_CODES = {
    "Server.InsufficientInstanceCapacity": "no_capacity",
    "Client.VolumeLimitExceeded": "quota_exceeded",
}
# EC2 writes when a user or the service ended the instance only into this free-text reason.
_TRANSITION_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


def instance_info(raw: dict[str, Any]) -> InstanceInfo:
    ec2_state = raw.get("State", {}).get("Name", "")
    state = _STATES.get(ec2_state, "unknown")
    reason_code = raw.get("StateReason", {}).get("Code", "")
    tags = tags_of(raw)
    market = "spot" if raw.get("InstanceLifecycle") == "spot" else "on-demand"
    detail: dict[str, Any] = {"ec2_state": ec2_state}
    reason = raw.get("StateReason", {}).get("Message") or raw.get("StateTransitionReason")
    if reason:
        detail["reason"] = reason
    if reason_code:
        detail["state_reason_code"] = reason_code
    if JOB_TAG in tags:
        detail["job"] = tags[JOB_TAG]
    if state == "terminated" and reason_code in LATE_REFUSAL_CODES:
        detail["refusal"] = LATE_REFUSAL_CODES[reason_code]
    return InstanceInfo(
        instance_id=raw["InstanceId"],
        zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        market=market,
        instance_type=raw.get("InstanceType", ""),
        state=state,
        reclaimed=market == "spot" and reason_code in SPOT_RECLAIM_CODES,
        address=raw.get("PublicIpAddress") or raw.get("PrivateIpAddress"),
        launched_at=_timestamp(raw.get("LaunchTime")),
        terminated_at=_ended_at(raw) if state == "terminated" else None,
        client_token=tags.get(TOKEN_TAG) or raw.get("ClientToken") or None,
        detail=detail,
    )


def unknown_info(instance_id: str, why: str) -> InstanceInfo:
    """What describe answers when EC2 could not be asked: never "terminated" on a failed probe."""
    return InstanceInfo(
        instance_id=instance_id, zone="", market="spot", instance_type="", state="unknown", detail={"error": why}
    )


def tags_of(raw: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in raw.get("Tags", [])}


def _timestamp(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


def _ended_at(raw: dict[str, Any]) -> float | None:
    match = _TRANSITION_TIME.search(raw.get("StateTransitionReason") or "")
    if match is None:
        return None
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
