"""The team server's ASGI app: the user API, the agent API, /metrics and /healthz on one port."""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request, Response, status
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from sqlalchemy import text

from spotrun.control.clock import Clock
from spotrun.control.heard import HeardAgents
from spotrun.control.jobs import JobNotFound
from spotrun.server.agent_api import create_agent_app
from spotrun.server.api import create_api_router
from spotrun.server.body_limit import MAX_BODY_BYTES, BodyLimit
from spotrun.server.early_auth import AuthBeforeBody
from spotrun.server.dashboard import create_dashboard_router
from spotrun.server.local_cloud import LocalCloudAccess
from spotrun.server.metrics import store_registry
from spotrun.server.metrics_access import metrics_guard
from spotrun.server.refusals import answer_invalid_requests
from spotrun.server.store_outages import StoreOutages
from spotrun.state import Store


class Health(BaseModel):
    ok: bool
    database: str


class Refusal(BaseModel):
    detail: str


AGENT_REFUSALS: dict[int | str, dict[str, object]] = {
    403: {"model": Refusal, "description": "the token is not this attempt's"},
    409: {"model": Refusal, "description": "a log chunk past the end of what is stored"},
    410: {"model": Refusal, "description": "the attempt has ended (for its last reports: some minutes ago)"},
}


# Any request can be refused so, before any route sees it (`BodyLimit`), or so when the store fails it (`StoreOutages`).
EVERY_ROUTE: dict[int | str, dict[str, object]] = {
    413: {"model": Refusal, "description": f"a body over {MAX_BODY_BYTES} bytes, more than any request takes"},
    503: {"model": Refusal, "description": "the store is unavailable for the moment (see Retry-After)"},
}


def _serve_api_docs(app: FastAPI) -> None:
    """/docs and /redoc as FastAPI serves them, but with the spec's URL relative to the page: under a proxy's path
    prefix, FastAPI's absolute /openapi.json would miss it."""

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="openapi.json", title=f"{app.title} - Swagger UI")

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="openapi.json", title=f"{app.title} - ReDoc")


def create_app(
    store: Store, clock: Clock | None = None, *, metrics_token: str | None = None,
    local_cloud: LocalCloudAccess = LocalCloudAccess.OFF, heard: HeardAgents | None = None,
) -> FastAPI:
    """The app on `store`; with `metrics_token`, /metrics answers only a request carrying it as its bearer token;
    `local_cloud` says whose jobs may run on the local cloud, on this machine (by default nobody's); `heard`: the
    heartbeats received, shared with this process's controller (`control.heard`)."""
    app = FastAPI(
        title="spotrun server", version="1",
        description="Train on spot instances: the team server's API. Authenticate with `Authorization: Bearer <token>`.",
        docs_url=None, redoc_url=None,  # served below, reading the spec by a relative URL
        responses=EVERY_ROUTE,
    )
    _serve_api_docs(app)
    app.include_router(create_api_router(store, local_cloud))
    app.include_router(create_dashboard_router())
    # The agents' routes (/agent/v1/..., attempt tokens) join this app, so agents and users share one address.
    app.include_router(create_agent_app(store, clock, heard).router, tags=["agent"], responses=AGENT_REFUSALS)
    app.add_exception_handler(JobNotFound, _not_found)
    answer_invalid_requests(app)
    app.add_middleware(AuthBeforeBody, store=store)
    app.add_middleware(StoreOutages)  # outside AuthBeforeBody, which reads the store too
    app.add_middleware(BodyLimit)  # added last, so it runs first: a body over the limit is refused before the token check
    registry = store_registry(store)

    @app.get("/metrics", tags=["operations"], response_class=Response,
             dependencies=[Depends(metrics_guard(metrics_token))],
             responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"},
                        401: {"model": Refusal, "description": "SPOTRUN_METRICS_TOKEN is set and not the bearer token"}})
    def metrics() -> Response:
        """Jobs by state, preemptions, recoveries and their time, dollars spent and saved; read from the store."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["operations"], response_model=Health, responses={503: {"model": Health}})
    def healthz() -> Health | JSONResponse:
        try:
            with store.session() as session:
                session.execute(text("SELECT 1"))
        except Exception as error:  # any failure to reach the store makes the server unhealthy
            body = Health(ok=False, database=f"unreachable: {type(error).__name__}")
            return JSONResponse(body.model_dump(), status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
        return Health(ok=True, database="ok")

    return app


async def _not_found(_request: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(error)}, status_code=status.HTTP_404_NOT_FOUND)
