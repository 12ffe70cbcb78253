"""The bodies the team server's API takes and answers (besides the job read models in `spotrun.server.views`);
the CLI's remote mode reads its answers into these same classes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from spotrun.server.views import BillView, JobRow


class LaunchRequest(BaseModel):
    spec: str = Field(max_length=1_000_000, description="the job file's YAML text")
    source: str | None = Field(
        default=None, max_length=1000,
        description="the job file's name, for messages; its stem names a job that has no `name:`",
    )
    base_dir: str | None = Field(
        default=None, max_length=4096,
        description="absolute folder a relative `workdir` is taken from (local cloud only; the server's own disk)",
    )


class Launched(BaseModel):
    id: int
    name: str
    owner: str


class SpecProblem(BaseModel):
    field: str
    message: str
    line: int | None


class InvalidSpec(BaseModel):
    detail: str
    source: str
    problems: list[SpecProblem]


class Message(BaseModel):
    detail: str


class OwnedJobRow(JobRow):
    owner: str


class CancelAccepted(BaseModel):
    job_id: int
    cancel_requested: bool


class PreemptRequest(BaseModel):
    notice_seconds: float | None = Field(
        default=None, ge=0, le=3600, allow_inf_nan=False, description="seconds of notice (default: the market's)"
    )


class PreemptAccepted(BaseModel):
    job_id: int
    instance_id: str
    attempt_number: int


class JobCost(BaseModel):
    job_id: int
    name: str
    state: str
    bill: BillView
