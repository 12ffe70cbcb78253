"""A job that waits long for spot piles up refused tries (a row each). What is read often — a placement, the job
list, a job's cost, the metrics — must not load those rows whole: they cost nothing and report nothing. The policy
still sees every try."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import generate_latest
from sqlalchemy import event

from spotrun.cli.embedded import EmbeddedBackend
from spotrun.server.metrics import store_registry
from spotrun.server.views import job_detail
from spotrun.state import Attempt, Job

# tests/control is on sys.path via conftest
from world import SPEC  # noqa: E402

WAITING = SPEC.replace("max_wait: 2h", "max_wait: 30d, fallback: wait")
TRIES = 20  # enough that reading them whole shows: the reads below may load at most 3 attempt rows


@contextmanager
def attempt_rows_loaded() -> Iterator[list[Attempt]]:
    """The Attempt objects the ORM builds from rows while the block runs."""
    loaded: list[Attempt] = []

    def count(target, _context) -> None:
        loaded.append(target)

    event.listen(Attempt, "load", count)
    try:
        yield loaded
    finally:
        event.remove(Attempt, "load", count)


def refused_for_long(world, placed_first: bool) -> int:
    """A job refused in every zone for many rounds (after a spot run that a preemption ended, when `placed_first`)."""
    job_id = world.submit(WAITING)
    if placed_first:
        world.spot_lost_after(job_id, 600)
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    while len(world.attempts(job_id)) < TRIES:
        world.tick(world.controller.settings.backoff_max + 1)
    return job_id


def test_a_placement_reads_the_tries_as_columns_and_the_policy_still_sees_them_all(world, monkeypatch):
    job_id = refused_for_long(world, placed_first=True)
    seen = []
    asked = world.controller.policy

    class Watched:
        def __init__(self, spec) -> None:
            self.policy = asked(spec)

        def place(self, ctx):
            seen.append(ctx)
            return self.policy.place(ctx)

        def __getattr__(self, name: str):
            return getattr(self.policy, name)

    monkeypatch.setattr(world.controller, "policy", Watched)
    before = len(world.attempts(job_id))
    with attempt_rows_loaded() as loaded:
        world.tick(world.controller.settings.backoff_max + 1)
    tries = world.attempts(job_id)
    assert len(tries) == before + 1, "the tick placed the job once more (and was refused)"
    assert len(seen) == 1 and len(seen[0].history) == before, "the policy saw every earlier try"
    assert [t.end_reason for t in seen[0].history] == [a.end_reason for a in tries[:before]]
    assert seen[0].progress is None and seen[0].history[0].end_reason == "preempted"
    assert len(loaded) <= 3, f"{len(loaded)} attempt rows loaded whole for one placement"


def test_the_job_list_its_cost_and_the_metrics_read_only_the_attempts_that_got_an_instance(world):
    """The metrics load no attempt at all: the database sums them (test_fleet_totals.py checks the sums)."""
    job_id = refused_for_long(world, placed_first=True)
    backend = EmbeddedBackend(world.store)
    with attempt_rows_loaded() as loaded:
        [row] = backend.rows()
        cost = backend.cost(job_id)
        metrics = generate_latest(store_registry(world.store)).decode()
    assert [a.end_reason for a in loaded] == ["preempted"] * 2, "one placed attempt, read by the row and the cost"
    assert row.attempts == 1 and row.preemptions == 1
    assert cost.bill.spot_seconds > 0 and cost.bill.on_demand_seconds == 0
    assert "spotrun_preemptions_total 1.0" in metrics
    assert len(world.attempts(job_id)) >= TRIES  # the refused tries are all still stored


def test_a_detail_without_the_settled_tries_does_not_read_them(world):
    job_id = refused_for_long(world, placed_first=True)
    newest = len(world.attempts(job_id))
    with attempt_rows_loaded() as loaded, world.store.session() as session:
        detail = job_detail(session, session.get(Job, job_id), world.clock.now(), settled_below=newest)
    assert [a.number for a in detail.attempts] == [1, newest], "the placed attempt and the newest try"
    assert len(loaded) <= 3, f"{len(loaded)} attempt rows loaded whole"
