"""The job page's Cancel and Preempt buttons in headless Chromium: they ask first, call the user API with the token
the dashboard reads with (a bearer header, never a URL or a cookie), show the API's answer, and are disabled for an
ended job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dashboard_world import VIEWPORT, Dashboard, log_in_to_job_page, next_poll, set_job_state

from spotrun.state import Job

POLL_WAIT_MS = 8_000  # the page polls every 3 s


class Confirmations:
    """Answers the page's confirm() dialogs in order, each queued answer once (none queued: dismissed)."""

    def __init__(self, page: Any) -> None:
        self.asked: list[str] = []
        self._answers: list[tuple[bool, Callable[[], object] | None]] = []
        page.on("dialog", self._answer)

    def will(self, accept: bool, meanwhile: Callable[[], object] | None = None) -> None:
        """Queue the next answer; `meanwhile` runs while the dialog is still open (the page's script is paused)."""
        self._answers.append((accept, meanwhile))

    def _answer(self, dialog: Any) -> None:
        self.asked.append(dialog.message)
        accept, meanwhile = self._answers.pop(0) if self._answers else (False, None)
        if meanwhile is not None:
            meanwhile()
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()


def open_job_page(browser: Any, dashboard: Dashboard, user: str, job_id: int) -> tuple[Any, Any, list[str]]:
    """A page logged in as `user` (through the login form) on the job's page; and a list that collects its
    API posts as "METHOD URL"."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.clock.install()  # time runs as usual; `next_poll` brings a poll forward
    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url) if request.method == "POST" else None)
    page.on("pageerror", lambda error: posts.append(f"page error: {error}"))
    log_in_to_job_page(page, dashboard, user, job_id)
    return context, page, posts


def cancel_requested(dashboard: Dashboard, job_id: int) -> bool:
    with dashboard.store.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.cancel_requested


def test_the_buttons_call_the_api_with_the_dashboards_token_and_show_its_answer(
    dashboard: Dashboard, browser: Any
) -> None:
    from playwright.sync_api import expect

    job_id, token = dashboard.running_job, dashboard.tokens["alice"]
    context, page, posts = open_job_page(browser, dashboard, "alice", job_id)
    cancel, preempt, result = page.locator("#cancel-job"), page.locator("#preempt-job"), page.locator("#action-result")
    expect(page.locator("#status")).to_contain_text("Live")
    expect(cancel).to_be_enabled()
    expect(preempt).to_be_enabled()
    confirmations = Confirmations(page)

    # Declining the confirmation sends nothing.
    confirmations.will(accept=False)
    preempt.click()
    assert confirmations.asked == [f"Preempt job {job_id}? The cloud reclaims its instance (with the notice window), "
                                   "as a real spot preemption would."]
    assert posts == [] and result.inner_text() == ""

    # Preempt: the seeded instance is not in the local cloud, so the API refuses (409) and says why.
    confirmations.will(accept=True)
    with page.expect_request(lambda request: request.method == "POST") as sent:
        preempt.click()
    assert sent.value.url == f"{dashboard.url}/api/v1/jobs/{job_id}/preempt"
    headers = sent.value.all_headers()
    assert headers["authorization"] == f"Bearer {token}" and "cookie" not in headers
    expect(result).to_have_attribute("data-status", "409")
    expect(result).to_contain_text("Refused (HTTP 409):")
    expect(result).to_contain_text(f"li-{job_id}-1")  # the server's own message names the instance
    expect(result).to_have_class("action-result error")

    # Cancel: accepted (202), said so, and stored.
    confirmations.will(accept=True)
    with page.expect_request(lambda request: request.method == "POST") as sent:
        cancel.click()
    assert sent.value.url == f"{dashboard.url}/api/v1/jobs/{job_id}/cancel"
    assert sent.value.all_headers()["authorization"] == f"Bearer {token}"
    expect(result).to_have_attribute("data-status", "202")
    expect(result).to_have_text("Cancel requested: the controller stops the job and gives back its instance.")
    assert cancel_requested(dashboard, job_id)

    # The job ends while the confirmation is open: the API's 409 is shown, then the poll disables both buttons.
    confirmations.will(accept=True, meanwhile=lambda: set_job_state(dashboard.store, job_id, "CANCELLED"))
    cancel.click()
    expect(result).to_have_attribute("data-status", "409")
    expect(result).to_have_text(f"Refused (HTTP 409): job {job_id} has already ended")
    next_poll(page, f"/api/v1/jobs/{job_id}?")
    expect(cancel).to_be_disabled(timeout=POLL_WAIT_MS)
    expect(preempt).to_be_disabled()
    expect(page.locator("#status")).to_contain_text("Job ended (CANCELLED)")

    assert confirmations.asked[-1] == f"Cancel job {job_id}? The controller stops it and gives back its instance."
    assert posts == [f"{dashboard.url}/api/v1/jobs/{job_id}/{action}" for action in ("preempt", "cancel", "cancel")]
    assert not [url for url in posts if token in url]
    context.close()


def test_the_buttons_are_disabled_for_an_ended_job(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    context, page, posts = open_job_page(browser, dashboard, "alice", dashboard.finished_job)
    expect(page.locator("#status")).to_contain_text("Job ended (SUCCEEDED)")
    expect(page.locator("#cancel-job")).to_be_disabled()
    expect(page.locator("#preempt-job")).to_be_disabled()
    page.locator("#cancel-job").click(force=True)  # a click on a disabled button does nothing
    assert posts == []
    context.close()
