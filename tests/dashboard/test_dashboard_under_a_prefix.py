"""The dashboard behind a proxy that serves spotrun under a path prefix and strips it, as nginx's
`location /spotrun/ { proxy_pass http://127.0.0.1:8080/; }` does: every page, script, style, API call, link and
redirect stays under the prefix."""

from __future__ import annotations

from typing import Any

from dashboard_world import VIEWPORT, Dashboard, LiveServer, PageErrors
from sqlalchemy import select
from starlette.responses import PlainTextResponse

from spotrun.server.app import create_app
from spotrun.state import Attempt

PREFIX = "/spotrun"


class PrefixStrippingProxy:
    """Only requests under the prefix reach the app, and without it; anything else is the proxy's 404."""

    def __init__(self, app: Any, prefix: str) -> None:
        self.app, self.prefix = app, prefix

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if not scope["path"].startswith(f"{self.prefix}/"):
                await PlainTextResponse("not under the proxy's prefix", status_code=404)(scope, receive, send)
                return
            scope = dict(scope, path=scope["path"][len(self.prefix):],
                         raw_path=scope["raw_path"][len(self.prefix.encode()):])
        await self.app(scope, receive, send)


def test_the_dashboard_works_under_a_path_prefix(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    with LiveServer(PrefixStrippingProxy(create_app(dashboard.store), PREFIX)) as proxy:
        base = f"{proxy.url}{PREFIX}"
        page = browser.new_context(viewport=VIEWPORT).new_page()
        seen = PageErrors(page)
        failed: list[str] = []
        page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)

        page.goto(f"{base}/")  # the root's redirect, then the job list's, to the login page
        page.wait_for_url(f"{base}/dashboard/login")
        expect(page.locator("#token")).to_be_visible()
        page.fill("#token", dashboard.tokens["alice"])
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/dashboard/")

        expect(page.locator("#jobs tbody tr")).to_have_count(2)
        page.locator(f"#jobs tr[data-job-id='{dashboard.finished_job}'] a").click()
        page.wait_for_url(f"{base}/dashboard/jobs/{dashboard.finished_job}")
        expect(page.locator("#status")).to_contain_text("Job ended (SUCCEEDED)")
        expect(page.locator("#logs .log")).to_have_count(3)
        assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).display") == "flex"  # styled

        page.locator(".topbar a.brand").click()
        page.wait_for_url(f"{base}/dashboard/")
        page.click("#logout")
        page.wait_for_url(f"{base}/dashboard/login")

        assert seen.urls and all(url.startswith(f"{base}/") for url in seen.urls), seen.urls
        assert any("/api/v1/jobs/" in url for url in seen.urls)
        assert failed == [] and seen.errors == []


def test_the_cli_and_an_agent_reach_the_server_under_the_prefix(dashboard: Dashboard) -> None:
    from spotrun.agent.client import ControllerClient, Delivery
    from spotrun.cli.remote import RemoteBackend

    with LiveServer(PrefixStrippingProxy(create_app(dashboard.store), PREFIX)) as proxy:
        remote = RemoteBackend(f"{proxy.url}{PREFIX}/", dashboard.tokens["alice"])
        assert {row.id for row in remote.rows()} == {dashboard.finished_job, dashboard.running_job}
        assert remote.detail(dashboard.running_job).job.name == "live-bert"

        with dashboard.store.session() as session:
            attempt = session.scalars(select(Attempt).where(Attempt.job_id == dashboard.running_job)).one()
        agent = ControllerClient(f"{proxy.url}{PREFIX}", f"agent-{dashboard.running_job}-1", attempt.id)
        replies: list[dict] = []
        try:
            assert agent.post("heartbeat", {"checkpoint_step": 7}, retry=False, on_reply=replies.append) is \
                Delivery.DELIVERED
        finally:
            agent.close()
        assert replies and replies[0]["ok"] is True


def test_a_trailing_slash_and_the_api_docs_stay_under_the_prefix(dashboard: Dashboard) -> None:
    """Starlette's own slash redirect named an absolute URL without the prefix, and /docs read /openapi.json."""
    import httpx

    with LiveServer(PrefixStrippingProxy(create_app(dashboard.store), PREFIX)) as proxy:
        base = f"{proxy.url}{PREFIX}"
        with httpx.Client(follow_redirects=True) as client:
            job = f"/dashboard/jobs/{dashboard.finished_job}"
            redirects = ((f"{job}/", job), ("/dashboard/login/", "/dashboard/login"), ("/", "/dashboard/"),
                         ("/dashboard", "/dashboard/"))
            for path, lands_on in redirects:
                response = client.get(f"{base}{path}")
                assert (response.status_code, str(response.url)) == (200, f"{base}{lands_on}"), path
            docs = client.get(f"{base}/docs")
            assert docs.status_code == 200 and "url: 'openapi.json'" in docs.text
            assert client.get(f"{base}/openapi.json").json()["info"]["title"] == "spotrun server"
            assert 'spec-url="openapi.json"' in client.get(f"{base}/redoc").text
