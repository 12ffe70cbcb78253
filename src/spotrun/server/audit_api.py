"""`GET /api/v1/audit`: the audit log of users and tokens (`spotrun.server.audit`), for admins only. (No `from
__future__ import annotations`: FastAPI reads the route's annotations, `Admin` among them, when it is declared.)"""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from spotrun.api_models import AuditFilter, AuditPage
from spotrun.server.audit import audit_page
from spotrun.server.auth import admin_dependency
from spotrun.server.schemas import Message
from spotrun.server.strict_json import StrictJsonRoute
from spotrun.server.users import Principal
from spotrun.state import Store


def audit_routes(store: Store) -> APIRouter:
    router = APIRouter(tags=["audit"], route_class=StrictJsonRoute)
    Admin = Annotated[Principal, Depends(admin_dependency(store))]

    @router.get("/audit", response_model=AuditPage,
                responses={403: {"model": Message, "description": "the caller is not an admin"}})
    def audit(admin: Admin, chosen: Annotated[AuditFilter, Query()]) -> AuditPage:
        """Who changed which user or token, and when, newest first: users added, tokens made and revoked, users
        disabled and enabled, admins made and unmade, whether through this API (the actor is the signed-in user) or
        by `spotrun user` / `spotrun token` on the store (`cli:<OS user>@<host>`). Tokens are named by their public
        prefix only. A non-admin is refused (403) before the parameters are read; a parameter that is wrong or
        unknown is refused (422 naming it)."""
        return audit_page(store, chosen)

    return router
