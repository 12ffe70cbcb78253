"""A job refused spot many times in a row: the dashboard's attempts table shows those tries as one row."""

from __future__ import annotations

from typing import Any

from dashboard_world import ON_DEMAND_PRICE, Dashboard, job_page, refused_try

from spotrun.control.tokens import hash_token
from spotrun.state import Attempt, Job

REFUSED = 5  # tries 2..6, between a preempted spot attempt and the on-demand one that finished


def seed_refused_job(dashboard: Dashboard, submitted_at: float) -> int:
    with dashboard.store.session() as session:
        job = Job(name="waiter", owner="alice", spec={"name": "waiter", "run": "train"}, state="SUCCEEDED",
                  created_at=submitted_at, updated_at=submitted_at + 3000, finished_at=submitted_at + 3000,
                  preemptions=1)
        session.add(job)
        session.flush()

        def placed(number: int, market: str, start: float, end: float, reason: str) -> Attempt:
            return Attempt(
                job_id=job.id, number=number, state="ended", provider="local", zone="local-a", market=market,
                instance_type="local.cpu", price_per_hour=0.12 if market == "spot" else ON_DEMAND_PRICE,
                on_demand_price_per_hour=ON_DEMAND_PRICE, client_token=f"ct-wait-{number}",
                token_hash=hash_token(f"agent-wait-{number}"), instance_id=f"li-wait-{number}",
                created_at=submitted_at + start, started_at=submitted_at + start, ended_at=submitted_at + end,
                end_reason=reason, billed_seconds=end - start,
            )

        session.add(placed(1, "spot", 0, 600, "preempted"))
        for number in range(2, 2 + REFUSED):
            session.add(refused_try(job.id, number, ("local-a", "local-b")[number % 2], submitted_at + 600 + 60 * number))
        session.add(placed(2 + REFUSED, "on-demand", 1200, 3000, "succeeded"))
        return job.id


def test_refused_tries_in_a_row_are_one_row_of_the_attempts_table(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    job_id = seed_refused_job(dashboard, submitted_at=1_800_000_000.0)
    page = job_page(browser, dashboard, "alice", job_id)

    expect(page.locator("#status")).to_contain_text("Job ended (SUCCEEDED)")
    rows = page.locator("#attempts tbody tr")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-attempt") for i in range(3)] == ["1", f"2-{1 + REFUSED}", str(2 + REFUSED)]
    folded = rows.nth(1)
    assert folded.get_attribute("data-tries") == str(REFUSED)
    text = folded.inner_text()
    assert f"2–{1 + REFUSED}" in text and f"no_capacity ×{REFUSED}" in text and "local-a, local-b" in text, text
