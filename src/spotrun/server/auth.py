"""Who is asking: the user API's bearer-token check, which jobs that user may see, and who may manage users."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from spotrun.control import jobs as jobs_api
from spotrun.server.early_auth import USER_REFUSAL, user_of
from spotrun.server.users import Principal, authenticate
from spotrun.state import Job, Store

_bearer = HTTPBearer(auto_error=False, description="a user's API token (`spotrun user add` / `spotrun token create`)")


def principal_dependency(store: Store) -> Callable[..., Principal]:
    """A FastAPI dependency answering 401 unless the request carries a live user token."""

    def current_principal(
        request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
    ) -> Principal:
        principal = getattr(request.state, "verified_principal", None)  # checked before the body (early_auth)
        if principal is None and credentials is not None:
            principal = user_of(store, credentials.credentials)
        if principal is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, USER_REFUSAL, headers={"WWW-Authenticate": "Bearer"}
            )
        return principal

    return current_principal


def still_signed_in(store: Store, request: Request) -> Callable[[], bool]:
    """Whether the bearer token of `request` is still live: a stream that outlasts the request re-checks it."""
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")

    def check() -> bool:
        with store.session() as session:
            return scheme.lower() == "bearer" and authenticate(session, token.strip()) is not None

    return check


def admin_dependency(store: Store) -> Callable[..., Principal]:
    """A FastAPI dependency answering 401 without a live token and 403 for a user who is not an admin; it runs
    before the body's fields are validated, so a non-admin gets 403 whatever they sent (only JSON that does not
    parse is refused earlier, with 422)."""

    def current_admin(principal: Principal = Depends(principal_dependency(store))) -> Principal:
        require_admin(principal)
        return principal

    return current_admin


def require_admin(principal: Principal) -> None:
    """403 unless the caller is an admin: for routes that only admins may use at all."""
    if not principal.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only an admin may do this")


def require_self_or_admin(principal: Principal, user_name: str) -> None:
    """403 unless the caller is that user or an admin (said before the user is looked up, so it tells nothing)."""
    if not principal.is_admin and principal.name != user_name:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only an admin may act for another user")


def owner_seen(principal: Principal) -> str | None:
    """Whose jobs the principal sees: its own, or everyone's (None) for an admin."""
    return None if principal.is_admin else principal.name


def may_see(principal: Principal, job: Job) -> bool:
    owner = owner_seen(principal)
    return owner is None or job.owner == owner


def visible_job(session: Session, job_id: int, principal: Principal) -> Job:
    """The job, or JobNotFound when it does not exist or belongs to someone else (the two look alike)."""
    job = jobs_api.get_job(session, job_id)
    if not may_see(principal, job):
        raise jobs_api.JobNotFound(job_id)
    return job
