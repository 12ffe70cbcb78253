"""The job page's bill says a saving only for a job that delivered its result (a failed or cancelled one saved
nothing), and says which attempts it leaves out: those stored at a price no instance has (before prices were capped),
whose dollars the API leaves out rather than answer infinite."""

from __future__ import annotations

import time
from typing import Any

import pytest
from dashboard_world import VIEWPORT, Dashboard, PageErrors, job_page, set_job_state
from sqlalchemy import select

from spotrun.control import jobs as jobs_api
from spotrun.costs.ledger import bill
from spotrun.state import Attempt


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED"])
def test_a_job_that_ended_without_a_result_shows_no_saving(dashboard: Dashboard, browser: Any, state: str) -> None:
    from playwright.sync_api import expect

    set_job_state(dashboard.store, dashboard.finished_job, state)
    page = job_page(browser, dashboard, "alice", dashboard.finished_job)
    seen = PageErrors(page)
    expect(page.locator("#status")).to_contain_text(f"Job ended ({state})")

    card = page.locator("#cost-card")
    expect(page.locator("#no-result-line")).to_have_text(f"nothing: the job ended {state} without a result")
    expect(page.locator("#saved-line")).to_be_hidden()
    expect(page.locator("#on-demand-term")).to_have_text("on-demand, same hours")
    assert "%" not in card.inner_text()  # no "saved $1.23 (45.6%)" anywhere on the card
    assert seen.errors == []


def test_an_attempt_stored_at_a_price_no_instance_has_is_left_out_and_said_so(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    job_id = dashboard.finished_job
    with dashboard.store.session() as session:  # its first attempt, as stored before prices were capped
        attempt = session.scalars(select(Attempt).where(Attempt.job_id == job_id, Attempt.number == 1)).one()
        attempt.price_per_hour = attempt.on_demand_price_per_hour = 1e308
    with dashboard.store.session() as session:
        expected = bill(jobs_api.job_attempts(session, job_id), time.time())
    assert expected.unpriced_attempts == 1
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    seen = PageErrors(page)
    page.goto(f"{dashboard.url}/dashboard/login")
    page.fill("#token", dashboard.tokens["alice"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{dashboard.url}/dashboard/")

    expect(page.locator(f"#jobs tr[data-job-id='{job_id}'] td.cost")).to_have_text(
        f"${expected.cost:.4f} + 1 unpriced")
    page.goto(f"{dashboard.url}/dashboard/jobs/{job_id}")
    expect(page.locator("#attempts tbody tr[data-attempt='1'] td.cost")).to_have_text("unpriced: over 1,000,000 $/h")
    expect(page.locator("#unpriced")).to_have_text(
        "1 attempt left out: stored at over 1,000,000 $/h, a price no instance has")
    assert float(page.locator("#cost").get_attribute("data-value")) == pytest.approx(expected.cost)
    assert float(page.locator("#saved").get_attribute("data-value")) == pytest.approx(expected.saved)
    assert seen.errors == []
