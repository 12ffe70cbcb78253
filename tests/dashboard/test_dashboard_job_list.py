"""The job list of a store that keeps every job: the jobs not ended and the newest 50 ended, newest first, and a
button for older ended ones while some are left out."""

from __future__ import annotations

from typing import Any

from dashboard_world import VIEWPORT, Dashboard
from sqlalchemy import insert

from spotrun.state import Job


def add_ended_jobs(dashboard: Dashboard, owner: str, count: int) -> list[int]:
    with dashboard.store.session() as session:
        first = session.query(Job).count() + 1
        ids = list(range(first, first + count))
        session.execute(insert(Job), [
            dict(id=job_id, name=f"old-{job_id}", owner=owner, spec={}, state="SUCCEEDED", created_at=0.0,
                 updated_at=0.0, finished_at=60.0) for job_id in ids
        ])
    return ids


def test_the_list_shows_the_jobs_not_ended_and_the_newest_ended_and_more_on_request(
    dashboard: Dashboard, browser: Any,
) -> None:
    from playwright.sync_api import expect

    ended = [dashboard.finished_job, *add_ended_jobs(dashboard, "alice", 55)]
    add_ended_jobs(dashboard, "bob", 3)  # newer, and not hers: they take none of her places
    page = browser.new_context(viewport=VIEWPORT).new_page()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/api/v1/jobs?" in request.url else None)
    page.goto(f"{dashboard.url}/dashboard/login")
    page.fill("#token", dashboard.tokens["alice"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{dashboard.url}/dashboard/")

    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(51)
    shown = [int(i) for i in rows.evaluate_all("rows => rows.map(row => row.dataset.jobId)")]
    assert shown == sorted([dashboard.running_job, *ended[-50:]], reverse=True)
    expect(page.locator("#status")).to_contain_text("older ended jobs left out")
    assert any(url.endswith("ended=false") for url in asked) and any(url.endswith("limit=51") for url in asked)

    page.click("#more")
    expect(rows).to_have_count(57)  # her 56 ended jobs and the running one
    expect(page.locator("#more")).to_be_hidden()
    expect(page.locator("#status")).not_to_contain_text("left out")
    assert "bobs-secret-job" not in page.locator("#jobs").inner_text()
