"""Runs of refused launch tries, folded: one row each in `spotrun status JOB`'s attempts table, and one line after
the first few tries in `--follow`."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from spotrun.api_models import AttemptView, EventView
from spotrun.cli.refusals import RefusalStreak, RefusedTries, fold_refused_tries
from spotrun.cli.views import attempts_table, follow_events
from spotrun.control import jobs as jobs_api
from spotrun.server.views import attempt_views, event_views, job_row

# tests/control is on sys.path via conftest
from world import SPEC  # noqa: E402


def rendered(table) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def refused_for_a_while_then_placed(world) -> int:
    """A job refused in every zone for a while (tries 1..n), then given spot in m-b (try n + 1)."""
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 2h, fallback: wait"))
    for _ in range(40):
        world.tick(5)
    world.cloud.capacity["m-b"] = True
    while not world.cloud.running():
        world.tick(5)
    return job_id


def test_a_job_refused_in_every_zone_for_a_while_shows_its_refusals_as_one_row(world):
    job_id = refused_for_a_while_then_placed(world)
    views = attempt_views(world.attempts(job_id), world.clock.now())
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
    cancelled = [attempt(1, reason="cancelled"), attempt(2, reason="cancelled")]  # not refused: each its own row
    assert fold_refused_tries(cancelled) == cancelled

    # a gang's refusal: one node refused, the others given back; each round folds with the next
    gang = [attempt(n, node=n % 3, reason="no_capacity" if n % 3 == 0 else "released") for n in range(6)]
    [folded] = fold_refused_tries(gang)
    assert folded.end == "no_capacity ×2, released ×4" and folded.nodes == "0, 1, 2"
    text = rendered(attempts_table(gang, 1, 1000.0))
    assert "0–5" in text and "no_capacity ×2, released ×4" in text and "0, 1, 2" in text


def job_events(world, job_id: int) -> list[EventView]:
    with world.store.session() as session:
        return event_views(jobs_api.job_events(session, job_id, after_id=0))


def test_the_end_of_each_try_without_an_instance_and_only_it_is_marked_no_instance(world):
    job_id = refused_for_a_while_then_placed(world)
    attempts = attempt_views(world.attempts(job_id), world.clock.now())
    marked = [e for e in job_events(world, job_id) if e.no_instance]
    assert len(marked) == sum(a.no_instance for a in attempts) == len(attempts) - 1
    assert {e.kind for e in marked} == {"attempt_ended"}
    agent = world.agent(world.attempts(job_id)[-1].instance_id)
    agent("started", {})
    world.tick(10)
    agent("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick(5)
    ended = [e for e in job_events(world, job_id) if e.kind == "attempt_ended"]
    assert ended[-1].data["reason"] == "succeeded" and not ended[-1].no_instance
    assert len([e for e in job_events(world, job_id) if e.no_instance]) == len(marked)


def test_follow_prints_the_first_tries_of_a_refused_run_then_one_line_for_the_rest(world):
    job_id = refused_for_a_while_then_placed(world)
    events = job_events(world, job_id)
    tries = len(world.attempts(job_id)) - 1
    assert tries > 6

    streak, printed, statuses = RefusalStreak(), [], []
    for event in events:
        printed += streak.take(event)
        refused_shown = sum(1 for item in printed if isinstance(item, EventView) and item.kind == "launch_refused")
        statuses.append((refused_shown, streak.status()))
    printed += streak.close()
    # the live line says nothing while the first tries are shown, then counts the held ones
    assert all(status is None for shown, status in statuses if shown < 3)
    assert f"{tries - 3} more launch tries without an instance since" in next(
        status for _, status in reversed(statuses) if status is not None)
    lines = [item for item in printed if isinstance(item, str)]
    assert len(lines) == 1 and f"{tries - 3} more launch tries got no instance (spot in " in lines[0], lines
    assert sorted(lines[0].split("spot in ")[1].split(":")[0].split(", ")) == ["m-a", "m-b", "m-c"]
    assert f"no_capacity ×{tries - 3})" in lines[0]
    shown = [item for item in printed if isinstance(item, EventView)]
    assert [e.message for e in shown if e.kind == "launch_refused"] == [
        e.message for e in events if e.kind == "launch_refused"][:3]
    # after the line: the try that got an instance, with the policy's reason, then its instance
    after = printed[printed.index(lines[0]) + 1:]
    assert after[0].kind == "state" and f"PROVISIONING: attempt {tries + 1}: spot in m-b" in after[0].message
    assert after[1].kind == "instance_launched"
    assert [e.id for e in shown] == sorted(e.id for e in shown) and len(shown) < len(events) - 3 * (tries - 3)


def test_a_run_of_as_many_tries_as_are_shown_folds_nothing(world):
    job_id = refused_for_a_while_then_placed(world)
    events = job_events(world, job_id)
    streak = RefusalStreak(shown_in_full=len(world.attempts(job_id)))
    printed = [item for event in events for item in streak.take(event)] + streak.close()
    assert printed == events


class OneJobBackend:
    """What `follow_events` reads: the job's row and its events, in two polls: the first ends amid the refused
    tries (the job still placing), the second brings the rest (the job has ended)."""

    def __init__(self, world, job_id: int) -> None:
        self.world, self.job_id, self.polls = world, job_id, 0

    def rows(self, job_id: int):
        self.polls += 1
        row = job_row(self.world.job(job_id), self.world.clock.now())
        return [row.model_copy(update={"state": "WAITING" if self.polls == 1 else "SUCCEEDED"})]

    def events(self, job_id: int, after: int) -> list[EventView]:
        events = [e for e in job_events(self.world, job_id) if e.id > after]
        return events[:30] if self.polls == 1 else events


def test_follow_events_prints_the_folded_line(world):
    job_id = refused_for_a_while_then_placed(world)
    tries = len(world.attempts(job_id)) - 1
    out, backend = StringIO(), OneJobBackend(world, job_id)
    assert follow_events(backend, job_id, Console(file=out, width=300), poll=0) == "SUCCEEDED"
    assert backend.polls == 2
    text = out.getvalue()
    assert f"{tries - 3} more launch tries got no instance" in text
    assert text.count("no spot capacity in") == 3, text
