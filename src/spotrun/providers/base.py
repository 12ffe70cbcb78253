"""The one small interface every place instances come from implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Market = Literal["spot", "on-demand"]
InstanceState = Literal["pending", "running", "terminated", "unknown"]


class ProviderError(Exception):
    """A launch the provider refused; subclasses say why."""


class NoCapacity(ProviderError):
    """The zone has no capacity for this instance type and market right now."""


class QuotaExceeded(ProviderError):
    """The account may not run more instances of this kind."""


class PriceTooLow(ProviderError):
    """The spot price is above the max price asked for."""


class LaunchInvalid(ProviderError, ValueError):
    """A launch request no retry can mend (a startup script over the cloud's limit): the job fails, saying why."""


@dataclass(frozen=True)
class LaunchRequest:
    zone: str
    market: Market
    instance_type: str
    client_token: str
    user_data: dict[str, Any]
    max_price: float | None = None
    accelerators: dict[str, int] | None = None  # e.g. {"V100": 1}, for clouds that attach GPUs to a VM


@dataclass(frozen=True)
class InstanceInfo:
    instance_id: str
    zone: str
    market: Market
    instance_type: str
    state: InstanceState
    reclaimed: bool = False  # the cloud took a spot instance back
    address: str | None = None
    launched_at: float | None = None
    terminated_at: float | None = None
    client_token: str | None = None
    # what the cloud said, for people; one key the controller reads: "refusal" on a terminated instance the cloud
    # accepted but never placed ("no_capacity", "price_too_low", "quota_exceeded"), ended as that refusal, uncharged
    detail: dict[str, Any] = field(default_factory=dict)
    # why the instance cannot start the agent, where the provider knows (a pod's image that cannot be pulled):
    # another instance would fail alike, so the controller counts the attempt as failed at its boot timeout
    start_failure: str | None = None
    # where the instance had to wait for capacity (a pod pending until a node takes it, one scaled up for it): when
    # it could begin to boot; while it still waits for capacity being brought up, the moment it was seen waiting.
    # The controller's boot timeout counts from then (a wait of at most observe.CAPACITY_WAIT_LIMIT)
    boot_began_at: float | None = None


def check_token_and_market(request: LaunchRequest, max_token_length: int) -> None:
    """What every cloud asks of a launch: a client token of at most `max_token_length` printable ASCII characters
    (it becomes the cloud's idempotency token or part of a name) and a known market."""
    token = request.client_token
    if not token:
        raise ValueError("launch request needs a client_token")
    if len(token) > max_token_length or not token.isascii() or not token.isprintable():
        raise ValueError(f"client_token must be at most {max_token_length} printable ASCII characters, got {token!r}")
    if request.market not in ("spot", "on-demand"):
        raise ValueError(f"unknown market {request.market!r}; expected spot or on-demand")


@runtime_checkable
class Provider(Protocol):
    name: str

    def zones(self, instance_type: str, accelerators: Mapping[str, int] | None = None) -> list[str]:
        """Where `instance_type` can be launched, with `accelerators` (the job's resources.accelerators: GPU name →
        count) attached where the cloud attaches them apart from the type (GCE); clouds whose types carry their GPUs
        ignore them."""

    def launch(self, request: LaunchRequest) -> InstanceInfo:
        """Start an instance; idempotent on request.client_token (the same token returns the same instance)."""

    def find_by_token(self, client_token: str) -> InstanceInfo | None: ...

    def describe(self, instance_id: str) -> InstanceInfo:
        """Current state; a failed probe answers state="unknown", never "terminated"."""

    def terminate(self, instance_id: str) -> None:
        """Stop and delete the instance; idempotent."""

    def list_instances(self) -> list[InstanceInfo]: ...

    def preempt(self, instance_id: str, notice_seconds: float | None = None) -> None:
        """Chaos: reclaim the instance as the cloud would, after the notice window."""

    # Optional, for a provider that judges a vanished instance by what it saw of it (Azure): `recall(recorded:
    # InstanceInfo) -> None` takes what the controller's store holds of an instance spotrun has not terminated, which
    # a restarted controller's provider has not seen (`Controller.describe_instance`).
