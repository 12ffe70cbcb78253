"""The bodies the team server's API takes and answers besides those the CLI reads too (`spotrun.api_models`): the
requests, the users and tokens, and the errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from spotrun.api_models import MAX_SOURCE_CHARS, JobRow
from spotrun.control.job_errors import MAX_NOTICE_SECONDS
from spotrun.spec.expansion import MAX_SPEC_CHARS
from spotrun.spec.models import MAX_NODES
from spotrun.server.users import (
    NAME_PATTERN, InvalidUserName, IssuedToken, Offboarded, TokenRecord, UserRecord, check_user_name,
)


# A field a request body does not know is refused (422 naming it), not ignored: a misspelt `base_dir`, `is_admin` or
# `notice_seconds` did something else than asked, silently. Strict: a value of another JSON type is refused, not
# converted (`"notice_seconds": "5"` was taken for 5, `"node": 1.0` for node 1), as `is_admin` refuses "yes".
REQUEST_BODY = ConfigDict(extra="forbid", strict=True)


class LaunchRequest(BaseModel):
    model_config = REQUEST_BODY
    spec: str = Field(max_length=MAX_SPEC_CHARS, description="the job file's YAML text")
    source: str | None = Field(
        default=None, max_length=MAX_SOURCE_CHARS,
        description="the job file's name, for messages; its stem names a job that has no `name:`",
    )
    base_dir: str | None = Field(
        default=None, max_length=4096,
        description="absolute folder a relative `workdir` is taken from (local cloud only; the server's own disk)",
    )


class RequestProblem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class InvalidRequest(BaseModel):
    """FastAPI's 422 for a body it cannot read, or whose own fields are wrong (a missing `spec`): not the job file's
    problems, which `InvalidSpec` lists."""

    detail: list[RequestProblem]


class Message(BaseModel):
    detail: str


class OwnedJobRow(JobRow):
    """A row of the job list: its owner always named (an admin's list holds everyone's jobs)."""

    owner: str


class PreemptRequest(BaseModel):
    model_config = REQUEST_BODY
    notice_seconds: float | None = Field(
        default=None, ge=0, le=MAX_NOTICE_SECONDS, allow_inf_nan=False, description="seconds of notice (default: the market's)"
    )
    node: int | None = Field(default=None, ge=0, lt=MAX_NODES, description="which node of a multi-node job (default 0)")




class TokenView(BaseModel):
    """A token as listed: its public prefix only, never its hash."""

    prefix: str
    created_at: float
    revoked: bool
    revoked_at: float | None

    @classmethod
    def of(cls, token: TokenRecord) -> TokenView:
        return cls(prefix=token.prefix, created_at=token.created_at, revoked=token.revoked_at is not None,
                   revoked_at=token.revoked_at)

    def record(self) -> TokenRecord:
        return TokenRecord(prefix=self.prefix, created_at=self.created_at, revoked_at=self.revoked_at)


class Me(BaseModel):
    name: str
    is_admin: bool
    # so that anyone finds the prefix of a token of theirs to revoke (GET /users, which lists them all, is admins')
    tokens: list[TokenView]


class UserView(BaseModel):
    id: int
    name: str
    is_admin: bool
    created_at: float
    # when they were disabled (offboarded), else null; a server older than this field sends none
    disabled_at: float | None = None
    tokens: list[TokenView]

    @classmethod
    def of(cls, user: UserRecord) -> UserView:
        return cls(id=user.id, name=user.name, is_admin=user.is_admin, created_at=user.created_at,
                   disabled_at=user.disabled_at, tokens=[TokenView.of(token) for token in user.tokens])

    def record(self) -> UserRecord:
        return UserRecord(id=self.id, name=self.name, is_admin=self.is_admin, created_at=self.created_at,
                          disabled_at=self.disabled_at, tokens=tuple(token.record() for token in self.tokens))


class UserDisabled(BaseModel):
    """What disabling a user did: the tokens revoked (public prefixes), and how many of their jobs still run."""

    user: str
    revoked_tokens: list[str]
    live_jobs: int = Field(description="their jobs not ended: they keep running unless an admin cancels them")
    already_disabled: bool

    @classmethod
    def of(cls, done: Offboarded) -> UserDisabled:
        return cls(user=done.user, revoked_tokens=list(done.revoked), live_jobs=done.live_jobs,
                   already_disabled=done.already_disabled)

    def record(self) -> Offboarded:
        return Offboarded(user=self.user, revoked=tuple(self.revoked_tokens), live_jobs=self.live_jobs,
                          already_disabled=self.already_disabled)


class AdminChange(BaseModel):
    model_config = REQUEST_BODY
    is_admin: StrictBool = Field(description="true makes the user an admin; false removes it (not the last one's)")


class NewUser(BaseModel):
    model_config = REQUEST_BODY
    # The pattern is documented for clients; the check itself is the one `spotrun user add` makes, with its message.
    name: str = Field(json_schema_extra={"pattern": NAME_PATTERN}, description="1-200 letters, digits or . _ @ -")
    # strict: "yes", "on" or 1 made an admin; only true does
    is_admin: StrictBool = Field(default=False, description="may see and act on every user's jobs and manage users")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        try:
            return check_user_name(name)
        except InvalidUserName as problem:
            raise ValueError(str(problem)) from None


class IssuedTokenView(BaseModel):
    """A new token: `token` is shown only in this answer (the server keeps its hash); `prefix` names it later."""

    user: str
    prefix: str
    token: str

    @classmethod
    def of(cls, issued: IssuedToken) -> IssuedTokenView:
        return cls(user=issued.user, prefix=issued.prefix, token=issued.token)


class UserCreated(IssuedTokenView):
    is_admin: bool


class TokenRevoked(BaseModel):
    prefix: str
    revoked: bool
