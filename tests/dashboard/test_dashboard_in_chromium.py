"""The dashboard in headless Chromium: log in with a token, the live job list, a job's timeline, bill and logs,
and screenshots whose pixels show the markets' colours in the timeline's order."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from dashboard_world import PREEMPTED_HISTORY, VIEWPORT, Dashboard, PageErrors, next_poll, set_job_state
from PIL import Image
from sqlalchemy import select

from spotrun.control import jobs as jobs_api
from spotrun.control.log_retention import prune_logs
from spotrun.costs.ledger import bill
from spotrun.state import Attempt, Instance, Store

POLL_WAIT_MS = 8_000  # the pages poll every 3 s
SPOT_GREEN, ON_DEMAND_BLUE, PREEMPTED_RED = (22, 163, 74), (37, 99, 235), (220, 38, 38)


def log_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/dashboard/")
    page.wait_for_url(f"{url}/dashboard/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/dashboard/")


def expected_bill(store: Store, job_id: int) -> Any:
    with store.session() as session:
        return bill(jobs_api.job_attempts(session, job_id), time.time())


def colour_runs(image: Image.Image, y: int, margin: int = 8) -> list[str]:
    """The sequence of colours along one row (spot, on-demand, preempted or other), runs under 3 px dropped."""
    rgb = image.convert("RGB")

    def classify(pixel: tuple[int, int, int]) -> str:
        for name, colour in (("spot", SPOT_GREEN), ("on-demand", ON_DEMAND_BLUE), ("preempted", PREEMPTED_RED)):
            if sum(abs(a - b) for a, b in zip(pixel, colour, strict=True)) < 30:
                return name
        return "other"

    runs: list[list[Any]] = []
    for x in range(margin, rgb.width - margin):
        name = classify(rgb.getpixel((x, y)))
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    kept: list[str] = []
    for name, length in runs:
        if length >= 3 and (not kept or kept[-1] != name):
            kept.append(name)
    return kept


def test_a_user_logs_in_follows_the_job_list_and_reads_a_preempted_job(
    dashboard: Dashboard, browser: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from playwright.sync_api import expect

    caplog.set_level(logging.INFO, logger="uvicorn.access")
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.clock.install()  # time runs as usual; `next_poll` brings a poll forward
    seen = PageErrors(page)
    token = dashboard.tokens["alice"]

    # A refused token is said so and not kept; then alice logs in.
    page.goto(f"{dashboard.url}/dashboard/login")
    page.fill("#token", "spr_0000_not-a-real-token")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("refused")
    seen.errors.clear()  # the refused check's 401 is logged by the console on purpose
    log_in(page, dashboard.url, token)

    # The list: alice's two jobs with their state, not bob's; a state change shows up by polling.
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(2)
    finished = page.locator(f"#jobs tr[data-job-id='{dashboard.finished_job}']")
    expect(finished.locator(".state")).to_have_text("SUCCEEDED")
    expect(finished.locator(".preemptions")).to_have_text("2")
    running = page.locator(f"#jobs tr[data-job-id='{dashboard.running_job}']")
    expect(running.locator(".state")).to_have_text("RUNNING")
    expect(running.locator(".market")).to_have_text("spot")
    expect(running.locator(".zone")).to_have_text("local-c")
    assert "bobs-secret-job" not in page.locator("#jobs").inner_text()
    set_job_state(dashboard.store, dashboard.running_job, "PREEMPTED")
    next_poll(page, "/api/v1/jobs?ended=false")
    expect(running.locator(".state")).to_have_text("PREEMPTED", timeout=POLL_WAIT_MS)
    list_png = page.screenshot(path=str(tmp_path / "jobs.png"))

    # The job page.
    finished.locator("a").click()
    page.wait_for_url(f"{dashboard.url}/dashboard/jobs/{dashboard.finished_job}")
    expect(page.locator("#status")).to_contain_text("Job ended (SUCCEEDED)")

    segments = page.locator("#timeline .segment")
    expect(segments).to_have_count(3)
    assert [segments.nth(i).get_attribute("data-market") for i in range(3)] == [p.market for p in PREEMPTED_HISTORY]
    assert [segments.nth(i).get_attribute("data-zone") for i in range(3)] == [p.zone for p in PREEMPTED_HISTORY]
    assert [segments.nth(i).locator(".preemption-mark").count() for i in range(3)] == [1, 1, 0]
    assert [segments.nth(i).get_attribute("data-attempt") for i in range(3)] == ["1", "3", "4"]
    gaps = page.locator("#timeline .gap")
    assert [gaps.nth(i).get_attribute("data-seconds") for i in range(gaps.count())] == ["300", "120"]
    expect(gaps.first).to_contain_text("1 try without capacity")
    expect(page.locator("#checkpoint-step")).to_have_text("1,000 of 1,250 (80.0%)")

    expected = expected_bill(dashboard.store, dashboard.finished_job)
    for element, value in (("#cost", expected.cost), ("#on-demand-cost", expected.on_demand_cost),
                           ("#saved", expected.saved), ("#saved-percent", expected.saved_fraction)):
        assert float(page.locator(element).get_attribute("data-value")) == pytest.approx(value)
    assert page.locator("#cost").inner_text() == f"${expected.cost:.4f}"
    assert page.locator("#on-demand-cost").inner_text() == f"${expected.on_demand_cost:.4f}"
    assert page.locator("#saved-percent").inner_text() == f"{expected.saved_fraction:.1%}"

    # Each attempt's cost, as charged: the first spot instance was reclaimed in its first hour, free on EC2.
    rows = page.locator("#attempts tbody tr")
    costs = {rows.nth(i).get_attribute("data-attempt"): rows.nth(i).locator("td.cost") for i in range(rows.count())}
    assert list(costs) == ["1", "2", "3", "4"]
    assert costs["1"].inner_text() == "$0.00 (0 s charged)"
    assert costs["2"].inner_text() == "$0.00"  # the try without capacity held nothing
    assert costs["3"].inner_text() == f"${900 / 3600 * 0.10:.4f}"  # charged as held: no note
    assert sum(float(cost.get_attribute("data-value")) for cost in costs.values()) == pytest.approx(expected.cost)
    ends = {number: rows.nth(i).locator("td.end-reason").inner_text() for i, number in enumerate(costs)}
    assert ends["3"] == "preempted, warned: rebalance" and ends["1"] == "preempted" and ends["4"] == "succeeded"

    logs = page.locator("#logs .log")
    expect(logs).to_have_count(3)
    for index, plan in enumerate(PREEMPTED_HISTORY):
        assert logs.nth(index).locator(".log-text").text_content() == plan.log
        assert f"· {plan.market} · {plan.zone} ·" in logs.nth(index).locator(".log-header").inner_text()

    # Screenshots: the page is drawn, and the timeline's pixels run spot|mark|gap|spot|mark|gap|on-demand.
    page_png = page.screenshot(path=str(tmp_path / "job.png"))
    timeline_png = page.locator("#timeline").screenshot(path=str(tmp_path / "timeline.png"))
    for png in (list_png, page_png):
        image = Image.open(io.BytesIO(png))
        assert image.format == "PNG" and image.size == (VIEWPORT["width"], VIEWPORT["height"])
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50, "the screenshot is (nearly) blank"
    timeline = Image.open(io.BytesIO(timeline_png))
    assert timeline.width > 1000 and 40 <= timeline.height <= 50
    assert colour_runs(timeline, y=6) == [
        "spot", "preempted", "other", "spot", "preempted", "other", "on-demand",
    ]

    # The token went only in headers: never in a URL the browser asked for, nor in the server's access log.
    assert seen.urls and not [url for url in seen.urls if token in url]
    access_log = [record.getMessage() for record in caplog.records if record.name == "uvicorn.access"]
    assert access_log and not [line for line in access_log if token in line]
    assert seen.errors == []
    context.close()


def test_another_users_job_is_not_found_and_a_revoked_token_logs_out(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    from spotrun.server.users import revoke_token

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    log_in(page, dashboard.url, dashboard.tokens["bob"])
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    page.goto(f"{dashboard.url}/dashboard/jobs/{dashboard.finished_job}")
    expect(page.locator("#status")).to_have_text(
        f"Job {dashboard.finished_job} not found (it does not exist or is not yours)."
    )
    assert page.locator("#job").is_hidden()

    assert revoke_token(dashboard.store, dashboard.tokens["bob"], time.time())
    page.goto(f"{dashboard.url}/dashboard/")
    page.wait_for_url(f"{dashboard.url}/dashboard/login")
    expect(page.locator("#login-note")).to_contain_text("refused the stored token")
    assert page.evaluate("localStorage.getItem('spotrun.token')") is None
    context.close()


def test_a_pruned_log_says_so_instead_of_its_text(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    pruned = prune_logs(dashboard.store, ended_before=time.time() + 60, now=time.time())
    assert pruned.jobs == 1  # the finished job; the running ones keep theirs
    page = browser.new_context(viewport=VIEWPORT).new_page()
    seen = PageErrors(page)
    log_in(page, dashboard.url, dashboard.tokens["alice"])
    page.goto(f"{dashboard.url}/dashboard/jobs/{dashboard.finished_job}")

    logs = page.locator("#logs .log")
    expect(logs).to_have_count(3)
    for index, plan in enumerate(PREEMPTED_HISTORY):
        text = logs.nth(index).locator(".log-text").text_content()
        assert f"its log of {len(plan.log.encode())} bytes was removed on" in text and plan.log not in text
    assert seen.errors == []


def test_a_charge_the_cloud_may_still_waive_is_marked_provisional(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    job_id = dashboard.finished_job
    release_at = time.time() + 120
    with dashboard.store.session() as session:  # attempt 3's instance, interrupted, left for the cloud to take back
        attempt = session.scalars(select(Attempt).where(Attempt.job_id == job_id, Attempt.number == 3)).one()
        session.add(Instance(id=attempt.instance_id, provider="local", attempt_id=attempt.id, zone=attempt.zone,
                             market="spot", instance_type="local.cpu", state="awaiting_reclaim",
                             launched_at=attempt.started_at, release_at=release_at))
    page = browser.new_context(viewport=VIEWPORT).new_page()
    seen = PageErrors(page)
    log_in(page, dashboard.url, dashboard.tokens["alice"])
    page.goto(f"{dashboard.url}/dashboard/jobs/{job_id}")

    cell = page.locator("#attempts tbody tr[data-attempt='3'] td.cost")
    expect(cell).to_contain_text("(free if the cloud takes it back by ")
    cost = float(cell.get_attribute("data-value"))
    assert cost == pytest.approx(900 / 3600 * 0.10)
    expect(page.locator("#provisional")).to_contain_text(f"${cost:.4f} of it provisional")
    assert "free if" not in page.locator("#attempts tbody tr[data-attempt='4'] td.cost").inner_text()
    assert seen.errors == []
