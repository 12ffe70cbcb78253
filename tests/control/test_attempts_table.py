"""`spotrun status JOB`'s attempts table folds runs of refused launch tries into one row each."""

from __future__ import annotations

from rich.console import Console

from spotrun.cli.views import RefusedTries, attempts_table, fold_refused_tries
from spotrun.server.views import AttemptView, attempt_views

# tests/control is on sys.path via conftest
from world import SPEC  # noqa: E402


def rendered(table) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def test_a_job_refused_in_every_zone_for_a_while_shows_its_refusals_as_one_row(world):
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 2h, fallback: wait"))
    for _ in range(40):
        world.tick(5)
    world.cloud.capacity["m-b"] = True
    while not world.cloud.running():
        world.tick(5)
    views = attempt_views(world.attempts(job_id))
    refused = views[:-1]
    assert len(refused) >= 6 and {a.end_reason for a in refused} == {"no_capacity"}

    items = fold_refused_tries(views)
    assert [type(item) for item in items] == [RefusedTries, AttemptView]
    assert items[0].tries == tuple(refused) and sorted(items[0].zones.split(", ")) == ["m-a", "m-b", "m-c"]
    text = rendered(attempts_table(views, job_id, world.clock.now()))
    assert f"1–{len(refused)}" in text and f"no_capacity ×{len(refused)}" in text
    assert len([line for line in text.splitlines() if "m-" in line]) == 2, text


def attempt(number: int, *, placed: bool = False, reason: str | None = "no_capacity", market: str = "spot",
            node: int = 0, ended: bool = True) -> AttemptView:
    started = 100.0 * number if placed else None
    return AttemptView(
        number=number, state="ended" if ended else "launching", provider="local", market=market,
        zone=f"z{number % 2}", instance_type="t", instance_id="i" if placed else None, created_at=100.0 * number,
        started_at=started, agent_started_at=None, notice_at=None, ended_at=100.0 * number + 50 if ended else None,
        end_reason=reason if ended else None, billed_seconds=50.0 if placed else 0.0, price_per_hour=1.0,
        on_demand_price_per_hour=3.0, checkpoint_step=None, log_bytes=0, node_rank=node,
    )


def test_only_runs_of_two_or_more_unplaced_tries_in_one_market_fold():
    lone = [attempt(1), attempt(2, placed=True, reason="preempted"), attempt(3), attempt(4, placed=True)]
    assert fold_refused_tries(lone) == lone

    markets = [attempt(1), attempt(2), attempt(3, market="on-demand"), attempt(4, market="on-demand")]
    assert [[a.number for a in item.tries] for item in fold_refused_tries(markets)] == [[1, 2], [3, 4]]

    still_launching = attempt(3, reason=None, ended=False)
    assert fold_refused_tries([attempt(1), attempt(2), still_launching])[1] is still_launching

    # a gang's refusal: one node refused, the others given back; each round folds with the next
    gang = [attempt(n, node=n % 3, reason="no_capacity" if n % 3 == 0 else "released") for n in range(6)]
    [folded] = fold_refused_tries(gang)
    assert folded.end == "no_capacity ×2, released ×4" and folded.nodes == "0, 1, 2"
    text = rendered(attempts_table(gang, 1, 1000.0))
    assert "0–5" in text and "no_capacity ×2, released ×4" in text and "0, 1, 2" in text
