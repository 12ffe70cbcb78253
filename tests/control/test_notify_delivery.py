"""Posting notifications (`webhooks`) and keeping at them (`notifier`): retries on an injected clock, giving up after
the bound, the cursor in the store across a restart, one worker per job, and the URL never shown whole."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import event, select

from spotrun.control import webhooks
from spotrun.control.clock import ManualClock
from spotrun.control.notifier import GIVE_UP_AFTER_SECONDS, Notifier
from spotrun.state import Attempt, Event, Job, Store, add_event
from webhook_server import WebhookServer

SECRET = "secret-part"


@pytest.fixture
def receiver() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


def news(event: str = "failed", message: str = "RUNNING → FAILED: <oom> & more", unpriced: int = 0) -> webhooks.JobNews:
    return webhooks.JobNews(event_id=9, event=event, message=message, at=1_700_000_000.0, job_id=3, job_name="digits",
                            owner="ann", state="FAILED", cost=1.23456, unpriced_attempts=unpriced)


# ---- the body and one post -------------------------------------------------------------------------------------

def test_the_json_body_carries_the_job_the_happening_and_its_cost() -> None:
    assert webhooks.body(news(), "https://hooks.example.com/x") == {
        "event_id": 9, "event": "failed", "message": "RUNNING → FAILED: <oom> & more", "time": "2023-11-14T22:13:20Z",
        "job_id": 3, "job_name": "digits", "owner": "ann", "state": "FAILED", "cost": 1.23456, "unpriced_attempts": 0,
    }


def test_a_slack_webhook_gets_slack_s_text_escaped_as_slack_wants() -> None:
    assert webhooks.body(news("fell_back"), "https://hooks.slack.com/services/T/B/x") == {"text": (
        "spotrun job 3 (digits, ann) fell back to on-demand\n"
        "RUNNING → FAILED: &lt;oom&gt; &amp; more\nstate FAILED, cost so far $1.23, at 2023-11-14T22:13:20Z")}


def test_both_bodies_say_what_the_cost_leaves_out() -> None:
    """A bill leaves out the attempts stored at a price no instance has, as `spotrun cost` and the API say; the
    webhook's cost did not."""
    assert webhooks.body(news(unpriced=2), "https://hooks.example.com/x")["unpriced_attempts"] == 2
    text = webhooks.body(news(unpriced=1), "https://hooks.slack.com/services/T/B/x")["text"]
    assert text.splitlines()[-2:] == [
        "state FAILED, cost so far $1.23, at 2023-11-14T22:13:20Z",
        "1 attempt left out: stored at over 1,000,000 $/h, a price no instance has"]


def test_a_post_reads_the_answer_as_told_worth_retrying_or_refused(receiver: WebhookServer) -> None:
    receiver.statuses = [503, 429, 404]
    outcomes = [webhooks.post(receiver.url(), {"event": n}) for n in ("a", "b", "c", "d")]
    assert [(o.told, o.retry, o.reason) for o in outcomes] == [
        (False, True, "HTTP 503"), (False, True, "HTTP 429"), (False, False, "HTTP 404"), (True, False, "")]
    assert receiver.events() == ["d"]


def test_a_webhook_that_does_not_answer_is_worth_another_try() -> None:
    outcome = webhooks.post("http://127.0.0.1:9/hook", {"event": "x"}, timeout=2)
    assert (outcome.told, outcome.retry, outcome.reason) == (False, True, "ConnectError")


# ---- the notifier ----------------------------------------------------------------------------------------------

def notify_job(store: Store, url: str, *, ended: bool = False, claimed_by: str | None = None) -> int:
    """A job with `notify` whose events say it was preempted, then failed (or is running again, not `ended`)."""
    with store.session() as session:
        job = Job(name="digits", owner="ann", spec={"run": "x", "notify": {"webhook": url, "events": [
            "preempted", "failed"]}}, state="FAILED" if ended else "RUNNING", created_at=0.0, updated_at=0.0,
            notified_event_id=0, claimed_by=claimed_by, claim_expires_at=10.0**10 if claimed_by else None)
        session.add(job)
        session.flush()
        add_event(session, at=5.0, kind="state", job_id=job.id, message="RUNNING → PREEMPTED: taken",
                  data={"from": "RUNNING", "to": "PREEMPTED"})
        add_event(session, at=6.0, kind="state", job_id=job.id, message="PREEMPTED → PROVISIONING: again",
                  data={"from": "PREEMPTED", "to": "PROVISIONING"})
        if ended:
            add_event(session, at=7.0, kind="state", job_id=job.id, message="RUNNING → FAILED: crashed",
                      data={"from": "RUNNING", "to": "FAILED"})
        return job.id


def notifier(store: Store, clock: ManualClock, worker_id: str | None = None, **kwargs) -> Notifier:
    """A notifier whose deliveries run at once, in the caller's thread."""
    return Notifier(store, clock.now, worker_id=worker_id, claim_ttl=30.0, start=lambda work: work(), **kwargs)


def cursor(store: Store, job_id: int) -> int | None:
    with store.session() as session:
        return session.get(Job, job_id).notified_event_id


def failures(store: Store, job_id: int) -> list[Event]:
    with store.session() as session:
        return list(session.scalars(select(Event).where(Event.job_id == job_id, Event.kind == "notification_failed")))


def test_every_notification_due_is_told_in_order_and_an_ended_job_s_cursor_goes(
    store: Store, receiver: WebhookServer,
) -> None:
    job_id = notify_job(store, receiver.url(), ended=True)
    clock = ManualClock()
    notifier(store, clock).run()
    assert receiver.events() == ["preempted", "failed"]
    assert receiver.bodies[1] | {"time": None} == {
        "event_id": 3, "event": "failed", "message": "RUNNING → FAILED: crashed", "time": None, "job_id": job_id,
        "job_name": "digits", "owner": "ann", "state": "FAILED", "cost": 0.0, "unpriced_attempts": 0}
    assert cursor(store, job_id) is None  # all told: the job is not read for notifications again
    notifier(store, clock).run()
    assert len(receiver.bodies) == 2


def test_the_posted_cost_counts_the_attempts_it_leaves_out(store: Store, receiver: WebhookServer) -> None:
    """A job stored before prices were capped: its attempt at 1e308 $/h is left out of the cost, which says so."""
    job_id = notify_job(store, receiver.url(), ended=True)
    with store.session() as session:
        for number, price in ((1, 1e308), (2, 0.36)):
            session.add(Attempt(
                job_id=job_id, number=number, state="ended", provider="local", zone="a", market="spot",
                instance_type="x", price_per_hour=price, on_demand_price_per_hour=1.0, client_token=f"t{number}",
                token_hash="-", created_at=0.0, started_at=0.0, ended_at=100.0, end_reason="failed",
                billed_seconds=100.0))
    notifier(store, ManualClock()).run()
    assert [(body["cost"], body["unpriced_attempts"]) for body in receiver.bodies] == [(0.01, 1), (0.01, 1)]


def test_a_job_with_nothing_new_to_settle_is_not_written_to(store: Store, receiver: WebhookServer) -> None:
    job_id = notify_job(store, receiver.url())
    telling = notifier(store, ManualClock())
    telling.run()
    assert receiver.events() == ["preempted"] and cursor(store, job_id) == 2
    writes: list[str] = []

    def count_writes(connection, cursor, statement: str, *args) -> None:
        if not statement.lstrip().upper().startswith(("SELECT", "PRAGMA")):
            writes.append(statement)

    event.listen(store.engine, "before_cursor_execute", count_writes)
    try:
        telling.run()
    finally:
        event.remove(store.engine, "before_cursor_execute", count_writes)
    assert writes == [] and len(receiver.bodies) == 1


def test_a_failing_webhook_is_retried_backing_off_on_the_clock_until_it_recovers(
    store: Store, receiver: WebhookServer,
) -> None:
    job_id = notify_job(store, receiver.url())
    clock = ManualClock()
    telling = notifier(store, clock)
    receiver.statuses = [500, 502]
    telling.run()  # 500: again in 5 s
    clock.advance(4.9)
    telling.run()  # not yet
    assert receiver.statuses == [502] and cursor(store, job_id) == 0
    clock.advance(0.1)
    telling.run()  # 502: again in 10 s
    clock.advance(9.9)
    telling.run()
    assert receiver.events() == []
    clock.advance(0.1)
    telling.run()
    assert receiver.events() == ["preempted"]
    assert cursor(store, job_id) == 2  # past the PROVISIONING event: nothing to tell there
    assert failures(store, job_id) == []


def test_a_webhook_failing_past_the_bound_is_given_up_with_an_event_that_hides_its_secret(
    store: Store, receiver: WebhookServer, caplog: pytest.LogCaptureFixture,
) -> None:
    job_id = notify_job(store, receiver.url(), ended=True)
    clock = ManualClock()
    telling = notifier(store, clock)
    receiver.statuses = [500] * 100
    with caplog.at_level(logging.INFO):
        while not failures(store, job_id):
            telling.run()
            clock.advance(60)
            assert clock.now() < ManualClock().now() + GIVE_UP_AFTER_SECONDS + 200, "never given up"
    [given_up] = failures(store, job_id)
    assert given_up.message.startswith("could not tell preempted, failed to the webhook at http://127.0.0.1:")
    assert "HTTP 500" in given_up.message and given_up.data["event_ids"] == [1, 3]
    assert cursor(store, job_id) is None
    tries = 100 - len(receiver.statuses)
    telling.run()
    assert 100 - len(receiver.statuses) == tries  # not tried again
    assert SECRET not in given_up.message and SECRET not in caplog.text and "127.0.0.1" in caplog.text


def test_the_bound_runs_from_the_first_failure_across_a_restart_which_gives_up_at_its_first_failure(
    store: Store, receiver: WebhookServer,
) -> None:
    job_id = notify_job(store, receiver.url())
    clock = ManualClock()
    receiver.statuses = [503] * 100
    first = notifier(store, clock)
    first.run()  # the first failure
    clock.advance(GIVE_UP_AFTER_SECONDS - 100)
    first.run()
    assert failures(store, job_id) == [] and len(receiver.statuses) == 98

    clock.advance(100)  # the bound is past, counted from the first failure; the controller restarts
    notifier(store, clock).run()
    assert len(receiver.statuses) == 97  # tried once more (the webhook might be back), then given up
    [given_up] = failures(store, job_id)
    assert f"failing for {GIVE_UP_AFTER_SECONDS:.0f} s" in given_up.message and "HTTP 503" in given_up.message
    assert cursor(store, job_id) == 2


def test_the_bound_of_the_next_notification_runs_from_its_own_first_failure(
    store: Store, receiver: WebhookServer,
) -> None:
    job_id = notify_job(store, receiver.url(), ended=True)
    clock = ManualClock()
    receiver.statuses = [503, 200] + [503] * 100  # preempted fails, then is told; failed fails from then on
    first = notifier(store, clock)
    first.run()
    clock.advance(GIVE_UP_AFTER_SECONDS - 100)
    first.run()
    assert receiver.events() == ["preempted"] and cursor(store, job_id) == 1

    clock.advance(200)  # past the bound from preempted's first failure, not from failed's
    notifier(store, clock).run()
    assert failures(store, job_id) == [] and cursor(store, job_id) == 1
    clock.advance(GIVE_UP_AFTER_SECONDS - 200)
    notifier(store, clock).run()
    [given_up] = failures(store, job_id)
    assert given_up.data["events"] == ["failed"] and cursor(store, job_id) is None


def test_a_worker_taking_a_job_over_keeps_the_bound_its_previous_worker_began(
    store: Store, receiver: WebhookServer,
) -> None:
    clock = ManualClock()
    job_id = notify_job(store, receiver.url(), claimed_by="a")
    receiver.statuses = [503] * 100
    notifier(store, clock, worker_id="a").run()
    clock.advance(GIVE_UP_AFTER_SECONDS)
    with store.session() as session:  # a is gone; b drives the job now
        session.get(Job, job_id).claimed_by = "b"
    notifier(store, clock, worker_id="b").run()
    assert len(receiver.statuses) == 98 and len(failures(store, job_id)) == 1


def test_a_webhook_that_refuses_for_good_is_given_up_at_once(store: Store, receiver: WebhookServer) -> None:
    job_id = notify_job(store, receiver.url())
    receiver.statuses = [404]
    notifier(store, ManualClock()).run()
    [given_up] = failures(store, job_id)
    assert "failing for 0 s; 1 try by this controller, the last: HTTP 404" in given_up.message
    assert cursor(store, job_id) == 2


def test_the_cursor_survives_a_restart_without_repeating_or_losing_a_notification(
    store: Store, receiver: WebhookServer,
) -> None:
    job_id = notify_job(store, receiver.url(), ended=True)
    clock = ManualClock()
    receiver.statuses = [200, 503]  # the first told, then the controller stops while the webhook is down
    notifier(store, clock).run()
    assert receiver.events() == ["preempted"] and cursor(store, job_id) == 1

    restarted = Store(store.url)
    try:
        notifier(restarted, clock).run()
    finally:
        restarted.dispose()
    assert receiver.events() == ["preempted", "failed"]
    assert cursor(store, job_id) is None


def test_only_the_worker_driving_a_job_tells_it_and_an_ended_job_s_is_taken_over_once_its_claim_lapses(
    store: Store, receiver: WebhookServer,
) -> None:
    clock = ManualClock()
    live = notify_job(store, receiver.url(), claimed_by="a")
    ended = notify_job(store, receiver.url(), ended=True, claimed_by="a")
    receiver.statuses = [503] * 10
    notifier(store, clock, worker_id="b").run()
    assert receiver.statuses == [503] * 10  # b posted nothing: a holds both claims
    with store.session() as session:
        session.get(Job, ended).claim_expires_at = clock.now() - 1  # a is gone: its claim lapsed
        session.get(Job, live).claim_expires_at = clock.now() - 1
    receiver.statuses = []
    notifier(store, clock, worker_id="b").run()
    assert receiver.events() == ["preempted", "failed"]  # the ended job's; the live one waits for its next driver
    with store.session() as session:
        assert session.get(Job, ended).claimed_by == "b" and cursor(store, ended) is None
        assert cursor(store, live) == 0
