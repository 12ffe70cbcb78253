"""Serves the dashboard's pages and assets. They hold no data: the browser's scripts fetch everything from the
user API with the token the user entered (kept in the browser's localStorage, sent only as a bearer header)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import FileResponse, RedirectResponse

from spotrun.server.api import JobId

STATIC_DIR = Path(__file__).parent / "static"
MEDIA_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}

# Scripts and styles only from this server, no inline code, no framing: an injected string cannot run and so
# cannot read the token from localStorage.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def _asset_names() -> frozenset[str]:
    return frozenset(path.name for path in STATIC_DIR.iterdir() if path.suffix in MEDIA_TYPES)


def _file(name: str) -> FileResponse:
    path = STATIC_DIR / name
    return FileResponse(path, media_type=f"{MEDIA_TYPES[path.suffix]}; charset=utf-8", headers=SECURITY_HEADERS)


def create_dashboard_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)
    assets = _asset_names()  # a fixed set: a request names one of these files or gets 404, never a path

    # Relative redirects and links throughout: behind a proxy that serves spotrun under a path prefix (and strips
    # it), an absolute path would leave the prefix.
    @router.get("/")
    def root() -> RedirectResponse:
        return RedirectResponse("dashboard/")

    @router.get("/dashboard")
    def dashboard_without_slash() -> RedirectResponse:
        return RedirectResponse("dashboard/")

    @router.get("/dashboard/")
    def job_list() -> FileResponse:
        return _file("jobs.html")

    @router.get("/dashboard/login")
    def login() -> FileResponse:
        return _file("login.html")

    @router.get("/dashboard/jobs/{job_id}")
    def job_page(job_id: JobId) -> FileResponse:
        return _file("job.html")

    # With a trailing slash: Starlette's own redirect would name an absolute URL, without the proxy's prefix.
    @router.get("/dashboard/login/")
    def login_with_slash() -> RedirectResponse:
        return RedirectResponse("../login")

    @router.get("/dashboard/jobs/{job_id}/")
    def job_page_with_slash(job_id: JobId) -> RedirectResponse:
        return RedirectResponse(f"../{job_id}")

    @router.get("/dashboard/static/{name}")
    def asset(name: str) -> FileResponse:
        if name not in assets:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no dashboard file {name!r}")
        return _file(name)

    return router
