"""A job refused spot many times in a row: the dashboard's event list shows the first tries' events, then one line
for the rest of the run (as `spotrun launch --follow` does), which grows in place while the job keeps being refused,
and is followed by the try that got an instance."""

from __future__ import annotations

from typing import Any

from dashboard_world import VIEWPORT, Dashboard, log_in_to_job_page, next_poll, refused_try

from spotrun.state import Job, add_event

ZONES = ("local-a", "local-b")
SUBMITTED = 1_800_000_000.0


def add_job(dashboard: Dashboard) -> int:
    with dashboard.store.session() as session:
        job = Job(name="waiter", owner="alice", spec={"name": "waiter", "run": "train"}, state="PENDING",
                  created_at=SUBMITTED, updated_at=SUBMITTED)
        session.add(job)
        session.flush()
        return job.id


def state_event(session, job_id: int, at: float, before: str, after: str, reason: str) -> None:
    """As `control.records.transition` writes it."""
    message = f"{before} → {after}: {reason}" if before != after else f"{after}: {reason}"
    add_event(session, at=at, kind="state", job_id=job_id, message=message, data={"from": before, "to": after})


def add_try(dashboard: Dashboard, job_id: int, number: int, at: float, state_before: str, placed: bool) -> str:
    """One launch try with the events the controller writes for it; the job's state after it."""
    zone = ZONES[number % 2]
    with dashboard.store.session() as session:
        attempt = refused_try(job_id, number, zone, at)
        if placed:
            attempt.state, attempt.instance_id, attempt.started_at = "running", f"li-events-{number}", at
            attempt.ended_at = attempt.end_reason = None
        session.add(attempt)
        session.flush()
        state_event(session, job_id, at, state_before, "PROVISIONING", f"attempt {number}: spot in {zone} (spot)")
        if placed:
            add_event(session, at=at, kind="instance_launched", job_id=job_id, attempt_id=attempt.id,
                      message=f"attempt {number}: spot instance li-events-{number} in {zone} at $0.1200/h")
            return "PROVISIONING"
        add_event(session, at=at, kind="attempt_ended", job_id=job_id, attempt_id=attempt.id,
                  message=f"attempt {number} (spot, {zone}) ended: no_capacity",
                  data={"reason": "no_capacity", "billed_seconds": 0.0, "market": "spot", "zone": zone})
        add_event(session, at=at, kind="launch_refused", job_id=job_id, attempt_id=attempt.id,
                  message=f"spot in {zone}: no spot capacity for local.cpu in {zone} right now")
        if number % 2 == 0:  # every zone refused: the job waits before the next round
            state_event(session, job_id, at, "PROVISIONING", "WAITING", "no spot capacity in any of 2 zones: waiting")
            return "WAITING"
        return "PROVISIONING"


def job_page_on_a_clock(browser: Any, dashboard: Dashboard, user: str, job_id: int) -> Any:
    """The job's page, its timers on Playwright's clock: time runs as usual, and `next_poll` jumps to the next poll."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.clock.install()
    log_in_to_job_page(page, dashboard, user, job_id)
    return page


def add_tries(dashboard: Dashboard, job_id: int, numbers: range, state: str, placed_last: bool = False) -> str:
    for number in numbers:
        state = add_try(dashboard, job_id, number, SUBMITTED + 60 * number, state,
                        placed=placed_last and number == numbers[-1])
    return state


def test_a_run_of_refused_tries_is_one_line_of_the_events_that_grows_in_place(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    job_id = add_job(dashboard)
    state = add_tries(dashboard, job_id, range(1, 9), "PENDING")  # 8 refused tries
    page = job_page_on_a_clock(browser, dashboard, "alice", job_id)

    events = page.locator("#events li")
    folded = page.locator("#events li.refused-tries")
    expect(folded).to_have_count(1)
    expect(folded).to_contain_text("5 more launch tries got no instance (spot in local-a, local-b: no_capacity ×5)")
    expect(page.locator("#events li[data-kind=launch_refused]")).to_have_count(3)  # the first 3 tries, in full
    assert events.last.get_attribute("class") == "refused-tries", "the held tries' line is the newest item"

    state = add_tries(dashboard, job_id, range(9, 13), state)  # 4 more refused, seen at the next poll
    next_poll(page, f"/api/v1/jobs/{job_id}?")
    expect(folded).to_contain_text("9 more launch tries got no instance (spot in local-a, local-b: no_capacity ×9)")
    expect(folded).to_have_count(1)

    add_tries(dashboard, job_id, range(13, 14), state, placed_last=True)  # this one gets an instance
    next_poll(page, f"/api/v1/jobs/{job_id}?")
    expect(page.locator("#events li[data-kind=instance_launched]")).to_have_count(1)
    texts = events.all_inner_texts()
    line = next(i for i, text in enumerate(texts) if "more launch tries" in text)
    assert "9 more launch tries got no instance" in texts[line], texts
    assert "PROVISIONING: attempt 13: spot in local-b" in texts[line + 1], "the try that got an instance follows"
    assert "attempt 13: spot instance li-events-13" in texts[line + 2], texts
    assert len(texts) == line + 3, texts
    assert sum("launch_refused" in text for text in texts) == 3


def test_the_page_keeps_the_settled_tries_and_asks_only_for_the_rest(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    job_id = add_job(dashboard)
    state = add_tries(dashboard, job_id, range(1, 9), "PENDING")
    page = job_page_on_a_clock(browser, dashboard, "alice", job_id)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if f"/api/v1/jobs/{job_id}?" in request.url else None)
    folded = page.locator("#attempts tbody tr.refused-tries")
    expect(folded).to_have_attribute("data-tries", "8")

    add_tries(dashboard, job_id, range(9, 14), state, placed_last=True)
    next_poll(page, f"/api/v1/jobs/{job_id}?")
    expect(page.locator("#attempts tbody tr[data-attempt='13']")).to_have_count(1)
    expect(folded).to_have_attribute("data-tries", "12")  # the kept tries and the ones read since, in order
    assert folded.get_attribute("data-attempt") == "1-12"
    assert any(url.endswith("settled_below=8") for url in asked), asked  # tries 1-7 were not sent again
