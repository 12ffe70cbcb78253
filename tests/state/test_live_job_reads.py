"""A store keeps every job it ran. What the controller and the daemon read at every tick — the jobs not ended, the
claims on them — and the job list of `spotrun status` must find those jobs through the state's index, not by reading every ended job (the query plan
of each statement, on SQLite, where the planner needs no statistics to pick the index)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event, insert, text

from spotrun.control import jobs as jobs_api
from spotrun.control.states import LIVE, state_names
from spotrun.server.daemon import Daemon
from spotrun.state import Job, Store, claims


@contextmanager
def statements(store: Store) -> Iterator[list[tuple[str, tuple]]]:
    seen: list[tuple[str, tuple]] = []

    def record(_conn, _cursor, statement, parameters, _context, _executemany) -> None:
        seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def plans_over_jobs(store: Store, seen: list[tuple[str, tuple]]) -> list[str]:
    """The query plan of each statement that filters jobs by state, one string each."""
    plans = []
    with store.engine.connect() as connection:
        for statement, parameters in seen:
            if "jobs.state" in statement and statement.lstrip().upper().startswith(("SELECT", "UPDATE")):
                rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
                plans.append(" / ".join(row[-1] for row in rows))
    return plans


def test_the_jobs_not_ended_are_found_through_the_state_index(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    with store.session() as session:
        session.execute(insert(Job), [
            dict(id=n, name=f"j{n}", owner="a", spec={}, state="SUCCEEDED" if n < 200 else "RUNNING",
                 created_at=0.0, updated_at=0.0) for n in range(1, 205)
        ])
    with statements(store) as seen:
        with store.session() as session:
            held = claims.claim_jobs(session, "worker-1", 100.0, 30.0, live_states=state_names(LIVE))
        assert Daemon(store, tick_interval=1.0, idle_exit=60.0)._has_work()
        with store.session() as session:  # `spotrun status` and the dashboard ask for these at each refresh
            unended = [job.id for job in jobs_api.list_jobs(session, ended=False)]
    assert held == unended == [200, 201, 202, 203, 204]

    plans = plans_over_jobs(store, seen)
    assert len(plans) >= 5, seen  # the claim's update and its pick, the renewal, the held jobs, the daemon, the list
    for plan in plans:  # e.g. "SEARCH jobs USING COVERING INDEX ix_jobs_state (state=?)"; never a SCAN
        assert "SCAN" not in plan and ("ix_jobs_state (state=?)" in plan or "ix_jobs_claimed_by" in plan), plan
    store.dispose()


def test_a_not_in_of_the_ended_states_would_read_every_job(sqlite_url: str) -> None:
    """The plan check above can fail: the form it replaced scans the table."""
    store = Store(sqlite_url)
    with store.engine.connect() as connection:
        rows = connection.execute(text(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"
        )).all()
    assert "SCAN" in " / ".join(row[-1] for row in rows)
    store.dispose()


def test_the_instances_left_to_the_cloud_are_found_through_their_index(sqlite_url: str) -> None:
    """Every tick reads the instances awaiting the cloud's reclaim (`control.reclaims`), out of every instance the
    store ever launched."""
    from spotrun.control import reclaims
    from spotrun.state import Attempt, Instance

    store = Store(sqlite_url)
    with store.session() as session:
        session.execute(insert(Job), [dict(id=1, name="j", owner="a", spec={}, state="RUNNING", created_at=0.0,
                                           updated_at=0.0)])
        session.execute(insert(Attempt), [dict(
            id=1, job_id=1, number=1, state="ended", provider="aws", zone="z", market="spot", instance_type="t",
            price_per_hour=1.0, on_demand_price_per_hour=3.0, client_token="t-1", token_hash="-", created_at=0.0)])
        session.execute(insert(Instance), [
            dict(id=f"i-{n}", provider="aws", attempt_id=1, zone="z", market="spot", instance_type="t",
                 state="awaiting_reclaim" if n >= 300 else "terminated", launched_at=0.0) for n in range(302)
        ])
    with statements(store) as seen:
        with store.session() as session:
            waiting = reclaims.awaiting_ids(session)
            listed = reclaims.awaiting_instances(session)
    assert waiting == {"i-300", "i-301"} and {row.id for row in listed} == waiting
    instance_reads = [(s, p) for s, p in seen if "FROM instances" in s]
    assert len(instance_reads) == 2, seen
    with store.engine.connect() as connection:
        for statement, parameters in instance_reads:
            plan = " / ".join(row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
            assert "ix_instances_awaiting_reclaim" in plan, plan


def test_the_warned_attempts_are_counted_through_their_index(sqlite_url: str) -> None:
    """Each /metrics scrape counts the attempts that had an early warning (`fleet_totals.early_warnings`), out of
    every attempt the store ever made."""
    from spotrun.server import fleet_totals
    from spotrun.state import Attempt

    store = Store(sqlite_url)
    with store.session() as session:
        session.execute(insert(Job), [dict(id=1, name="j", owner="a", spec={}, state="RUNNING", created_at=0.0,
                                           updated_at=0.0)])
        session.execute(insert(Attempt), [dict(
            id=n, job_id=1, number=n, state="ended", provider="aws", zone="z", market="spot", instance_type="t",
            price_per_hour=1.0, on_demand_price_per_hour=3.0, client_token=f"t-{n}", token_hash="-", created_at=0.0,
            end_reason="preempted", warned_at=5.0 if n % 100 == 0 else None,
            warning="aws-imds/rebalance" if n % 100 == 0 else None) for n in range(1, 302)])
    with statements(store) as seen:
        with store.session() as session:
            counted = fleet_totals.early_warnings(session)
    assert counted == {("aws-imds/rebalance", "preempted"): 3}
    [(statement, parameters)] = [(s, p) for s, p in seen if "FROM attempts" in s]
    with store.engine.connect() as connection:
        plan = " / ".join(row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
    assert "ix_attempts_warned" in plan, plan
