"""A multi-node job in the dashboard: one timeline lane per node on a shared axis, the replaced node's gap in
its own lane, and each attempt's node in the table."""

from __future__ import annotations

from typing import Any

from dashboard_world import ON_DEMAND_PRICE, Dashboard, job_page

from spotrun.control.tokens import hash_token
from spotrun.state import Attempt, Job


# (node, start, end, end reason): node 1 is preempted at 600 s and its replacement starts at 660 s.
GANG_HISTORY = ((0, 0, 1800, "succeeded"), (1, 0, 600, "preempted"), (2, 0, 1800, "succeeded"),
                (1, 660, 1800, "succeeded"))


def seed_gang_job(dashboard: Dashboard, submitted_at: float) -> int:
    with dashboard.store.session() as session:
        job = Job(name="ddp", owner="alice", spec={"name": "ddp", "run": "train", "resources": {"nodes": 3}},
                  state="SUCCEEDED", created_at=submitted_at, updated_at=submitted_at + 1800,
                  finished_at=submitted_at + 1800, preemptions=1)
        session.add(job)
        session.flush()
        for number, (node, start, end, reason) in enumerate(GANG_HISTORY, start=1):
            session.add(Attempt(
                job_id=job.id, number=number, node_rank=node, state="ended", provider="local", zone="local-a",
                market="spot", instance_type="local.cpu", price_per_hour=0.12, on_demand_price_per_hour=ON_DEMAND_PRICE,
                client_token=f"ct-gang-{number}", token_hash=hash_token(f"agent-gang-{number}"),
                instance_id=f"li-gang-{number}", created_at=submitted_at + start, started_at=submitted_at + start,
                agent_started_at=submitted_at + start + 1, ended_at=submitted_at + end, end_reason=reason,
                billed_seconds=end - start, address=f"127.0.0.{number + 1}",
            ))
        return job.id


def test_a_multi_node_job_shows_one_lane_per_node(dashboard: Dashboard, browser: Any) -> None:
    from playwright.sync_api import expect

    job_id = seed_gang_job(dashboard, submitted_at=1_800_000_000.0)
    page = job_page(browser, dashboard, "alice", job_id)

    expect(page.locator("#status")).to_contain_text("Job ended (SUCCEEDED)")
    lanes = page.locator("#timeline .lane")
    expect(lanes).to_have_count(3)
    assert [lanes.nth(i).get_attribute("data-node") for i in range(3)] == ["0", "1", "2"]
    replaced = lanes.nth(1)
    assert [replaced.locator(".segment").nth(i).get_attribute("data-attempt") for i in range(2)] == ["2", "4"]
    assert replaced.locator(".preemption-mark").count() == 1
    assert replaced.locator(".gap").get_attribute("data-seconds") == "60"
    assert lanes.nth(0).locator(".gap").count() == 0 and lanes.nth(0).locator(".segment").count() == 1
    widths = [lanes.nth(i).locator(".lane-track").bounding_box()["width"] for i in range(3)]
    assert max(widths) - min(widths) < 1, "the lanes share one axis"
    rows = page.locator("#attempts tbody tr")
    expect(rows).to_have_count(4)
    assert [rows.nth(i).get_attribute("data-node") for i in range(4)] == ["0", "1", "2", "1"]
