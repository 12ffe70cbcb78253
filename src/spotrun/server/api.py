"""The user API (/api/v1): what the CLI's remote mode and the dashboard call. Every route acts for the user whose
token came with the request; the work itself is done by `spotrun.control.jobs` (jobs) and `spotrun.server.users`
(users and tokens, as `spotrun user` / `spotrun token` do), as in embedded mode."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import yaml
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from spotrun.api_models import (
    CALLER_HEADER, CancelAccepted, EventView, InvalidSpec, JobCost, JobDetail, Launched, PreemptAccepted, SpecProblem,
)
from spotrun.control import jobs as jobs_api
from spotrun.control.logs import log_size, read_log
from spotrun.providers import ProviderError
from spotrun.server import users as users_api
from spotrun.server.audit_api import audit_routes
from spotrun.server.auth import (
    admin_dependency, owner_seen, principal_dependency, require_self_or_admin, still_signed_in, visible_job,
)
from spotrun.server.local_cloud import REFUSED_BY_SETTING, LocalCloudAccess, local_cloud_problem
from spotrun.server.logstream import job_log_stream_async
from spotrun.server.schemas import (
    AdminChange, InvalidRequest, IssuedTokenView, LaunchRequest, Me, Message, NewUser, OwnedJobRow, PreemptRequest,
    TokenRevoked, TokenView, UserCreated, UserDisabled, UserView,
)
from spotrun.server.stored_text import StoredText
from spotrun.server.strict_json import StrictJsonRoute
from spotrun.server.users import PREFIX_PATTERN, TOKEN_MARK, Principal
from spotrun.server.views import event_views, job_cost, job_detail, job_row
from spotrun.spec import Problem, SpecError, located, parse_spec
from spotrun.state import Store
from spotrun.state.models import MAX_ID

LOG_PRUNED_AT_HEADER = "X-Log-Pruned-At"  # when log retention removed an attempt's log: seconds since the epoch
MAX_LISTED = 1000  # jobs a list asks for at most, with `limit`; older ones are paged with `before`
JobId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="the job's id")]
UserName = Annotated[StoredText, PathParam(min_length=1, max_length=200, description="the user's name")]
# A whole token is taken too: one pasted into the URL is exposed already, so revoking it is what its owner wants. The
# access log and a 422 show it cut to its prefix (`users.without_secrets`).
TokenId = Annotated[str, PathParam(
    pattern=rf"^(?:{PREFIX_PATTERN}|{TOKEN_MARK}{PREFIX_PATTERN}(?:_[A-Za-z0-9_-]{{0,256}})?)$",
    description="the token's public prefix, or the whole token (`spr_<prefix>_<secret>`, which must be that token)",
)]

NOT_FOUND = {404: {"model": Message, "description": "no such job, or another user's"}}
UNAUTHORIZED = {401: {"model": Message, "description": "missing, unknown or revoked token"}}
CONFLICT = {409: {"model": Message, "description": "the job is not in a state that allows this"}}
ADMIN_ONLY = {403: {"model": Message, "description": "the caller is not an admin"}}
SELF_OR_ADMIN = {403: {"model": Message, "description": "the caller is neither that user nor an admin"}}
NO_USER = {404: {"model": Message, "description": "no user of that name"}}
LAST_ADMIN = {409: {"model": Message, "description": "it would leave no enabled admin, or lock the caller out"}}
NAMES_CALLER = {200: {"headers": {CALLER_HEADER: {
    "description": "the caller's user name: the jobs whose `owner` it is are theirs (an admin sees everyone's)",
    "schema": {"type": "string"}}}}}


def create_api_router(store: Store, local_cloud: LocalCloudAccess = LocalCloudAccess.OFF) -> APIRouter:
    """The routes on `store`; `local_cloud` says whose jobs may run on the local cloud (`server.local_cloud`)."""
    router = APIRouter(prefix="/api/v1", responses=UNAUTHORIZED)
    router.include_router(_job_routes(store, local_cloud))
    router.include_router(_user_routes(store))
    router.include_router(audit_routes(store))
    return router


def _job_routes(store: Store, local_cloud: LocalCloudAccess) -> APIRouter:
    router = APIRouter(tags=["jobs"], route_class=StrictJsonRoute)
    User = Annotated[Principal, Depends(principal_dependency(store))]

    @router.post(
        "/jobs", status_code=status.HTTP_201_CREATED, response_model=Launched,
        responses={422: {"model": InvalidSpec | InvalidRequest,
                         "description": "the job file is invalid, or the request itself; nothing was stored"}},
    )
    def launch(request: LaunchRequest, user: User) -> Launched | JSONResponse:
        """Submit a job file's text; it is validated as `spotrun launch` does, and owned by the caller. A job on the
        local cloud is refused unless SPOTRUN_SERVER_LOCAL_CLOUD allows the caller (the default allows nobody)."""
        source = request.source or "<request>"
        default_name = Path(request.source).stem if request.source else None
        try:
            if "\0" in source:  # the store keeps it as text (PostgreSQL's holds no NUL)
                raise SpecError("<request>", [Problem("source", "must not hold NUL characters")])
            if request.base_dir is not None and ("\0" in request.base_dir or not request.base_dir.startswith("/")):
                raise SpecError(source, [Problem("base_dir", "must be an absolute path (starting with /) without NUL "
                                                             "characters")])
            spec = parse_spec(request.spec, source=source, default_name=default_name or None)
            if (refused := local_cloud_problem(spec, user, local_cloud)) is not None:
                raise SpecError(source, [refused], heading=REFUSED_BY_SETTING)
            base_dir = Path(request.base_dir) if request.base_dir else None
            job_id = jobs_api.submit(store, spec, time.time(), spec_dir=base_dir, owner=user.name, source=source)
        except SpecError as error:
            return _invalid_spec(located(error, request.spec))
        except yaml.YAMLError as error:  # parse_spec lets the YAML reader's refusals (e.g. a NUL byte) through
            return _invalid_spec(SpecError(source, [Problem("", f"invalid YAML: {error}")]))
        return Launched(id=job_id, name=spec.name or "job", owner=user.name)

    @router.get("/jobs", response_model=list[OwnedJobRow], responses=NAMES_CALLER)
    def list_jobs(
        user: User,
        response: Response,
        ended: Annotated[bool | None, Query(description="only the jobs that have ended (true) or not (false)")] = None,
        before: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only the jobs numbered below it")] = None,
        limit: Annotated[int | None, Query(ge=1, le=MAX_LISTED, description="only the newest this many")] = None,
    ) -> list[OwnedJobRow]:
        """The caller's jobs (an admin's: everyone's), oldest first; of those selected, the newest `limit`. A store
        keeps every job: `spotrun status` and the dashboard ask for the jobs not ended and the newest ended ones."""
        now = time.time()
        response.headers[CALLER_HEADER] = user.name
        with store.session() as session:
            return [
                OwnedJobRow(**job_row(job, now).to_json())
                for job in jobs_api.list_jobs(session, owner=owner_seen(user), ended=ended, before=before, limit=limit)
            ]

    @router.get("/jobs/{job_id}", response_model=JobDetail, responses={**NOT_FOUND, **NAMES_CALLER})
    def get_job(
        job_id: JobId, user: User, response: Response,
        settled_below: Annotated[int, Query(
            ge=0, le=MAX_ID, description="leave out the attempts numbered below it that got no instance "
            "(`no_instance`): they never change once ended, so a client that keeps them asks only for the rest")] = 0,
    ) -> JobDetail:
        response.headers[CALLER_HEADER] = user.name
        with store.session() as session:
            return job_detail(session, visible_job(session, job_id, user), time.time(), settled_below=settled_below)

    @router.get("/jobs/{job_id}/events", response_model=list[EventView], responses=NOT_FOUND)
    def events(
        job_id: JobId, user: User,
        after: Annotated[int, Query(ge=0, le=2**63 - 1, description="only events with a larger id")] = 0,
    ) -> list[EventView]:
        with store.session() as session:
            visible_job(session, job_id, user)
            return event_views(jobs_api.job_events(session, job_id, after_id=after))

    @router.get(
        "/jobs/{job_id}/logs", response_class=StreamingResponse,
        responses={**NOT_FOUND, 200: {"content": {"text/plain": {}}, "description": "the logs as `spotrun logs` prints them"}},
    )
    def logs(
        request: Request, job_id: JobId, user: User,
        follow: Annotated[bool, Query(description="keep the response open, streaming, until the job ends")] = False,
    ) -> StreamingResponse:
        """All attempts' logs as one text stream, each attempt's start marked; a followed stream ends once its token
        is revoked."""
        with store.session() as session:
            visible_job(session, job_id, user)
        stream = job_log_stream_async(store, job_id, follow=follow, still_allowed=still_signed_in(store, request))
        return StreamingResponse(stream, media_type="text/plain; charset=utf-8")

    @router.get(
        "/jobs/{job_id}/attempts/{number}/log", response_class=PlainTextResponse,
        responses={**NOT_FOUND, 200: {
            "content": {"text/plain": {}}, "description": "the log's bytes from `offset`",
            "headers": {
                "X-Log-Size": {"description": "where the next read starts", "schema": {"type": "integer"}},
                LOG_PRUNED_AT_HEADER: {"description": "only for a log that log retention removed (then no bytes "
                                       "are sent): when, in seconds since the epoch", "schema": {"type": "number"}},
            }}},
    )
    def attempt_log(
        job_id: JobId, number: Annotated[int, PathParam(ge=1, le=MAX_ID)], user: User,
        offset: Annotated[int, Query(ge=0, le=2**53)] = 0,
    ) -> PlainTextResponse:
        """One attempt's log from a byte offset; the `X-Log-Size` header says where the next read starts. A log that
        log retention removed answers no bytes, and `X-Log-Pruned-At` says when it was removed."""
        with store.session() as session:
            visible_job(session, job_id, user)
            attempt = next((a for a in jobs_api.job_attempts(session, job_id) if a.number == number), None)
            if attempt is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} has no attempt {number}")
            data = read_log(session, attempt, offset)
            # asked past the end: where the log ends, not the offset asked (a client going on from there skipped)
            size = offset + len(data) if data else min(offset, log_size(attempt))
            headers = {"X-Log-Size": str(size)}
            if attempt.log_pruned_at is not None:
                headers[LOG_PRUNED_AT_HEADER] = repr(attempt.log_pruned_at)
        return PlainTextResponse(data, headers=headers)

    @router.post(
        "/jobs/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=CancelAccepted,
        responses={**NOT_FOUND, **CONFLICT},
    )
    def cancel(job_id: JobId, user: User) -> CancelAccepted:
        """Ask the controller to stop the job and give back its instance."""
        with store.session() as session:
            visible_job(session, job_id, user)
        if not jobs_api.request_cancel(store, job_id, time.time()):
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} has already ended")
        return CancelAccepted(job_id=job_id, cancel_requested=True)

    @router.post(
        "/jobs/{job_id}/preempt", status_code=status.HTTP_202_ACCEPTED, response_model=PreemptAccepted,
        responses={**NOT_FOUND, **CONFLICT},
    )
    def preempt(job_id: JobId, user: User, request: PreemptRequest | None = None) -> PreemptAccepted:
        """Chaos: have the cloud reclaim the job's instance, with the notice window."""
        with store.session() as session:
            visible_job(session, job_id, user)
        notice = request.notice_seconds if request else None
        node = request.node if request else None
        try:
            target = jobs_api.preempt(store, job_id, time.time(), notice, node)
        except jobs_api.JobNotFound:
            raise
        except (LookupError, ProviderError, NotImplementedError) as problem:
            raise HTTPException(status.HTTP_409_CONFLICT, str(problem) or type(problem).__name__) from None
        return PreemptAccepted(job_id=job_id, instance_id=target.instance_id, attempt_number=target.attempt_number)

    @router.get("/jobs/{job_id}/cost", response_model=JobCost, responses=NOT_FOUND)
    def cost(job_id: JobId, user: User) -> JobCost:
        """What the job cost, what it would have cost on-demand, and the saving."""
        with store.session() as session:
            return job_cost(session, visible_job(session, job_id, user), time.time())

    return router


def _user_routes(store: Store) -> APIRouter:
    """Users and tokens. Admins manage everyone; a user may only see themself and make or revoke their own tokens."""
    router = APIRouter(tags=["users"], route_class=StrictJsonRoute)
    User = Annotated[Principal, Depends(principal_dependency(store))]
    Admin = Annotated[Principal, Depends(admin_dependency(store))]

    @router.get("/me", response_model=Me)
    def me(user: User) -> Me:
        """Who the token belongs to, and their tokens (public prefixes and dates, never a token or its hash)."""
        tokens = users_api.find_user(store, user.name).tokens
        return Me(name=user.name, is_admin=user.is_admin, tokens=[TokenView.of(token) for token in tokens])

    @router.get("/users", response_model=list[UserView], responses=ADMIN_ONLY)
    def list_users(admin: Admin) -> list[UserView]:
        """Every user with their tokens' public prefixes and whether each is revoked (never a token or its hash)."""
        return [UserView.of(record) for record in users_api.list_users(store)]

    @router.post(
        "/users", status_code=status.HTTP_201_CREATED, response_model=UserCreated,
        responses={**ADMIN_ONLY, 409: {"model": Message, "description": "a user of that name exists (in any case)"}},
    )
    def add_user(request: NewUser, admin: Admin, response: Response) -> UserCreated:
        """Create a user with a first token, shown only in this answer (as `spotrun user add` prints it)."""
        try:
            issued = users_api.add_user(store, request.name, time.time(), admin=request.is_admin, actor=admin.name)
        except users_api.UserExists as problem:
            raise HTTPException(status.HTTP_409_CONFLICT, str(problem)) from None
        _never_cache(response)
        return UserCreated(**IssuedTokenView.of(issued).model_dump(), is_admin=request.is_admin)

    @router.post(
        "/users/{name}/tokens", status_code=status.HTTP_201_CREATED, response_model=IssuedTokenView,
        responses={**SELF_OR_ADMIN, **NO_USER, 409: {"model": Message, "description": "the user is disabled"}},
    )
    def create_token(name: UserName, user: User, response: Response) -> IssuedTokenView:
        """A new token for the caller (or, for an admin, any user), shown only in this answer."""
        require_self_or_admin(user, name)
        with _user_refusals():
            issued = users_api.create_token(store, name, time.time(), actor=user.name)
        _never_cache(response)
        return IssuedTokenView.of(issued)

    @router.post("/users/{name}/disable", response_model=UserDisabled, responses={**ADMIN_ONLY, **NO_USER, **LAST_ADMIN})
    def disable_user(name: UserName, admin: Admin) -> UserDisabled:
        """Offboard a user: revoke all their live tokens at once and make no new one for them. Their jobs are kept,
        and those not ended run on (`live_jobs`) unless an admin cancels them. An admin cannot disable themself."""
        with _user_refusals():
            return UserDisabled.of(users_api.disable_user(store, name, time.time(), actor=admin.name))

    @router.post("/users/{name}/enable", response_model=UserView, responses={**ADMIN_ONLY, **NO_USER})
    def enable_user(name: UserName, admin: Admin) -> UserView:
        """Undo a disabling; no token comes back (make a new one: POST /users/{name}/tokens)."""
        with _user_refusals():
            return UserView.of(users_api.enable_user(store, name, time.time(), actor=admin.name))

    @router.patch("/users/{name}", response_model=UserView, responses={**ADMIN_ONLY, **NO_USER, **LAST_ADMIN})
    def change_user(name: UserName, request: AdminChange, admin: Admin) -> UserView:
        """Make a user an admin, or not: removing the last enabled admin is refused (409)."""
        with _user_refusals():
            return UserView.of(users_api.set_admin(store, name, request.is_admin, time.time(), actor=admin.name))

    @router.post(
        "/tokens/{prefix}/revoke", response_model=TokenRevoked,
        responses={
            404: {"model": Message, "description": "no live token with that prefix, or another user's"},
            422: {"model": Message | InvalidRequest,
                  "description": "not a prefix nor a token, or a whole token whose secret is not that token's"},
        },
    )
    def revoke_token(prefix: TokenId, user: User) -> TokenRevoked:
        """Revoke a token: requests carrying it are refused from now on. A user may revoke only their own tokens;
        another's answers 404, exactly like a missing one, and is left as it was."""
        owner = None if user.is_admin else user.name
        public = users_api.token_prefix(prefix)
        try:
            revoked = users_api.revoke_token(store, prefix, time.time(), owner=owner, actor=user.name)
        except users_api.NotThatToken as problem:  # its message names the token by its prefix only
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(problem)) from None
        if not revoked:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no live token with id {public}")
        return TokenRevoked(prefix=public, revoked=True)

    return router


@contextmanager
def _user_refusals() -> Iterator[None]:
    """No such user is 404; a change the users' state forbids (a disabled user, the last admin) 409."""
    try:
        yield
    except users_api.UnknownUser as problem:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(problem)) from None
    except users_api.UserConflict as problem:
        raise HTTPException(status.HTTP_409_CONFLICT, str(problem)) from None


def _never_cache(response: Response) -> None:
    """An answer carrying a new token must not be kept by a browser or a proxy."""
    response.headers["Cache-Control"] = "no-store"


def _invalid_spec(error: SpecError) -> JSONResponse:
    body = InvalidSpec(
        detail=error.heading, source=error.source,
        problems=[SpecProblem(field=p.field, message=p.message, line=p.line) for p in error.problems],
    )
    return JSONResponse(body.model_dump(), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)
