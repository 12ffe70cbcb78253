"""The validated job description: what to run, on what, how to treat spot, where checkpoints go."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from spotrun.spec.fields import (
    Accelerators,
    CheckpointStore,
    Deadline,
    Duration,
    EnvName,
    EnvValue,
    JobName,
    NonBlankStr,
    STORED,
    PositiveDuration,
    Price,
    Zones,
    at_least_seconds,
    at_most,
)
from spotrun.limits import MAX_NODES
from spotrun.spec.notify import DEFAULT_NOTIFY_EVENTS, NotifyEvents, WebhookUrl
from spotrun.user_paths import expand_user

LOCAL_CLOUD = "local"
# the clouds `resources.cloud` may name (`spotrun.providers.get_provider` has one provider for each)
CLOUDS = (LOCAL_CLOUD, "aws", "gcp", "azure", "kubernetes")
LOCAL_DEFAULT_INSTANCE_TYPE = "local.cpu"


class _SpecModel(BaseModel):
    # strict: a YAML `nodes: "2"` or `use_spot: 1` is a mistake to report, not to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Prices(_SpecModel):
    """$/h the user pays for the instance type (e.g. negotiated prices, or a type the catalog lacks)."""

    on_demand: Price
    spot: Price


# Far past any real job, and bounded so that a typo (10**18) is refused rather than met: it would restart a crash loop,
# or keep to spot through preemptions, without end, each attempt a launch billed.
MAX_RESTARTS_ON_ERROR = 10_000
MAX_PREEMPTIONS_BEFORE_FALLBACK = 10_000
MAX_PROCS_PER_NODE = 1024  # torchrun's processes on one node, usually one per GPU: far more than any instance's GPUs
# The agent backs complete checkpoints up to the store every sync_interval (and node 0 of a gang lists the store as
# often, up to every 5 s): a millisecond would have it copy and list the store back to back for the whole run.
MIN_SYNC_INTERVAL_SECONDS = 1.0


class Resources(_SpecModel):
    cloud: NonBlankStr = LOCAL_CLOUD
    prices: Prices | None = None  # None: spotrun's price catalog
    accelerators: Accelerators | None = None
    nodes: int = Field(default=1, ge=1, le=MAX_NODES)
    # Declared after cloud and accelerators so its check can see them (pydantic validates fields in order).
    instance_type: NonBlankStr | None = Field(default=None, validate_default=True)

    @field_validator("instance_type")
    @classmethod
    def _default_instance_type(cls, instance_type: str | None, info: ValidationInfo) -> str | None:
        if instance_type is not None:
            return instance_type
        if "cloud" not in info.data or "accelerators" not in info.data:
            return None  # those fields are already reported as bad; guessing here would add noise
        if info.data["accelerators"] is not None:
            return None
        if info.data["cloud"] not in CLOUDS:
            return None  # `resource_problems` names the unknown cloud: a misspelt one needs no instance type
        if info.data["cloud"] == LOCAL_CLOUD:
            return LOCAL_DEFAULT_INSTANCE_TYPE
        raise ValueError(f"required when cloud is {info.data['cloud']!r} and no accelerators are given")


class SpotSpec(_SpecModel):
    use_spot: bool = True
    fallback: Literal["on-demand", "wait"] = "on-demand"
    max_price: Price | None = None  # None: the on-demand price
    zones: Zones | None = None  # None: every zone the provider offers
    max_wait: Duration | None = None
    deadline: Deadline | None = None  # datetime: absolute; float: seconds after launch
    policy: NonBlankStr = "default"
    preemptions_before_fallback: Annotated[int, at_most(MAX_PREEMPTIONS_BEFORE_FALLBACK)] = Field(default=3, ge=1)
    fallback_window: PositiveDuration = 3600.0
    notice_grace: Duration = 30.0
    # an EC2 rebalance recommendation (this spot instance's pool is at higher risk of interruption): "keep" records
    # it; "move" moves the job make-before-break to spot in another zone, where its policy finds one
    on_rebalance: Literal["keep", "move"] = "keep"
    # seconds lost at each start (boot, setup, restore), for deadline-aware policies; None: measured from the job's
    # attempts once its step rate is known, 6 minutes before that
    restart_overhead: Duration | None = None


class CheckpointSpec(_SpecModel):
    dir: NonBlankStr = "checkpoints"
    store: CheckpointStore | None = None  # None: a folder under SPOTRUN_HOME, chosen by the controller
    sync_interval: Annotated[
        PositiveDuration, at_least_seconds(MIN_SYNC_INTERVAL_SECONDS, "the agent backs checkpoints up this often")
    ] = 30.0
    # the most the agent's final backup (after the run, or a notice) may take; None: the agent's default, 6 h
    final_backup_timeout: PositiveDuration | None = None


class DistributedSpec(_SpecModel):
    """How the ranks of a multi-node job (resources.nodes > 1) are started on each node.

    launcher "env": the agent runs `run` once per node with MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
    NODE_RANK, LOCAL_RANK set (one process per node); "torchrun": the agent runs `run` under torchrun with
    procs_per_node processes per node, which sets them for each process."""

    launcher: Literal["env", "torchrun"] = "env"
    procs_per_node: Annotated[int, at_most(MAX_PROCS_PER_NODE)] = Field(default=1, ge=1)
    gang_timeout: PositiveDuration = 600.0  # every node up within this, or what was got is given back

    @model_validator(mode="after")
    def _one_process_without_torchrun(self) -> DistributedSpec:
        if self.launcher == "env" and self.procs_per_node > 1:
            raise ValueError("procs_per_node > 1 needs launcher: torchrun (the env launcher starts one process per node)")
        return self


class NotifySpec(_SpecModel):
    """Where the job's owner is told what happens to it: each happening named in `events` (`spec.notify`'s names) is
    posted to `webhook` as JSON (Slack's incoming-webhook body for hooks.slack.com) by the controller."""

    webhook: WebhookUrl
    # not `on:` (as CI files say): YAML reads a bare `on` as true, not as the key's name
    events: NotifyEvents = Field(default_factory=lambda: list(DEFAULT_NOTIFY_EVENTS))


class JobSpec(_SpecModel):
    name: JobName | None = None
    run: NonBlankStr
    setup: str | None = None
    workdir: NonBlankStr | None = None
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    spot: SpotSpec = Field(default_factory=SpotSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    distributed: DistributedSpec = Field(default_factory=DistributedSpec)
    max_restarts_on_error: Annotated[int, at_most(MAX_RESTARTS_ON_ERROR)] = Field(default=3, ge=0)
    estimated_duration: Duration | None = None
    notify: NotifySpec | None = None

    @field_validator("distributed")
    @classmethod
    def _only_with_several_nodes(cls, value: DistributedSpec, info: ValidationInfo) -> DistributedSpec:
        """Set for one node, it was ignored: `run` ran once, without the rendezvous its ranks waited for. Its defaults
        (as `to_json` writes them for every job) say nothing, and a job stored with more is read back as it was."""
        resources = info.data.get("resources")
        if resources is None or resources.nodes > 1 or value == DistributedSpec() or (info.context or {}).get(STORED):
            return value
        raise ValueError(
            "applies to multi-node jobs only (resources.nodes > 1), and this one has 1 node: it would be ignored; "
            "on one machine, start the processes in `run` (e.g. torchrun --standalone --nproc-per-node 4 train.py)"
        )

    @classmethod
    def stored(cls, data: dict[str, Any]) -> JobSpec:
        """The spec of a stored job (`to_json`'s): as validated when it was stored, values past the bounds a later
        spotrun set on new specs included (durations, counts, sync_interval, a store without a bucket)."""
        return cls.model_validate(data, context={STORED: True})

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict that `JobSpec.model_validate` turns back into an equal spec."""
        return self.model_dump(mode="json")

    def deadline_at(self, submitted_at: float) -> float | None:
        """The deadline as UNIX seconds; a relative deadline counts from `submitted_at`."""
        deadline = self.spot.deadline
        if deadline is None:
            return None
        if isinstance(deadline, datetime):
            return deadline.timestamp()
        return submitted_at + deadline

    def resolved_workdir(self, base_dir: str | os.PathLike[str]) -> str | None:
        """The absolute folder to run in; a relative workdir is taken from `base_dir` (the job file's folder).
        UnknownUser where it starts with ~user for a user this machine does not have."""
        if self.workdir is None:
            return None
        return _absolute(self.workdir, base_dir)

    def resolved_checkpoint_store(self, base_dir: str | os.PathLike[str]) -> str | None:
        """`checkpoint.store` with a local path made absolute, a relative one taken from `base_dir` (the job file's
        folder) as `workdir` is (UnknownUser alike); a URL (s3://, gs://, file://) as written."""
        store = self.checkpoint.store
        if store is None or "://" in store:
            return store
        return _absolute(store, base_dir)


def _absolute(path: str, base_dir: str | os.PathLike[str]) -> str:
    """`path` made absolute, `~` and `~user` expanded; UnknownUser (a ValueError) for a user this machine lacks."""
    return os.path.abspath(expand_user(base_dir) / expand_user(path))
