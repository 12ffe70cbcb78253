"""The controller tells a job's owner what happens to it (spec `notify`) after its tick, never waiting for the webhook,
and the webhook's URL is never shown whole."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from spotrun.cli.embedded import EmbeddedBackend
from spotrun.cli.main import app
from spotrun.control import jobs, webhooks
from spotrun.control.notifier import Notifier
from spotrun.server.daemon import Daemon
from spotrun.server.views import job_detail
from spotrun.spec import parse_spec
from spotrun.state import Job
from webhook_server import WebhookServer
from world import SPEC

SECRET = "secret-part"


@pytest.fixture
def receiver() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


def at_once(work) -> None:
    work()


def test_a_worker_tells_a_job_s_preemption_its_fallback_and_its_end(world, receiver: WebhookServer) -> None:
    world.controller = world.new_controller(worker_id="w1")
    world.controller.notifier = Notifier(world.store, world.clock.now, worker_id="w1", claim_ttl=30.0, start=at_once)
    spec = SPEC.replace("preemptions_before_fallback: 3", "preemptions_before_fallback: 1")
    job_id = world.submit(spec + f"notify: {{webhook: '{receiver.url()}'}}\n")
    assert world.job(job_id).notified_event_id == 0
    instance = world.run_to_running(job_id)
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    instance = world.run_to_running(job_id)
    world.agent(instance)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick()

    assert receiver.events() == ["preempted", "fell_back", "succeeded"]
    assert [a.market for a in world.attempts(job_id)] == ["spot", "on-demand"]
    fell_back, succeeded = receiver.bodies[1], receiver.bodies[2]
    assert "on-demand instance" in fell_back["message"] and fell_back["state"] in ("PROVISIONING", "RUNNING")
    assert succeeded["state"] == "SUCCEEDED" and succeeded["cost"] > 0 and succeeded["job_id"] == job_id
    assert world.job(job_id).notified_event_id is None  # all told: no longer read


def test_a_job_without_notify_has_no_cursor(world) -> None:
    assert world.job(world.submit()).notified_event_id is None


def test_the_tick_hands_the_post_to_a_thread_and_does_not_wait_for_it(world) -> None:
    answer, posted = threading.Event(), []

    def slow_webhook(url: str, payload: dict) -> webhooks.Outcome:
        posted.append((payload["event"], answer.wait(5)))  # answered only once the tick has returned
        return webhooks.TOLD

    world.controller.notifier = Notifier(world.store, world.clock.now, worker_id=None, claim_ttl=30.0,
                                         post=slow_webhook)
    job_id = world.submit(SPEC + "notify: {webhook: 'https://hooks.example.com/x', events: [cancelled]}\n")
    world.controller.tick()
    with world.store.session() as session:
        session.get(Job, job_id).cancel_requested = True
    world.tick()  # cancels the job, and returns while its webhook has not answered
    assert world.job(job_id).state == "CANCELLED" and world.job(job_id).notified_event_id is not None
    answer.set()
    for thread in [t for t in threading.enumerate() if t.name == "notify"]:
        thread.join(5)
    assert posted == [("cancelled", True)] and world.job(job_id).notified_event_id is None


def test_the_api_shows_the_webhook_as_its_scheme_and_host_only(world) -> None:
    job_id = world.submit(SPEC + f"notify: {{webhook: 'https://hooks.slack.com/services/{SECRET}'}}\n")
    with world.store.session() as session:
        detail = job_detail(session, session.get(Job, job_id), world.clock.now())
    assert detail.notify.webhook == "https://hooks.slack.com"
    assert detail.notify.events == ["succeeded", "failed", "cancelled", "preempted", "fell_back"]
    assert SECRET not in detail.model_dump_json()


def test_spotrun_status_shows_the_webhook_as_its_scheme_and_host_only(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPOTRUN_SERVER", raising=False)
    spec = parse_spec(SPEC + f"notify: {{webhook: 'https://hooks.slack.com/services/{SECRET}', events: [failed]}}\n")
    job_id = jobs.submit(EmbeddedBackend().store, spec, 1.0)
    shown = CliRunner().invoke(app, ["status", str(job_id)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "notifies: https://hooks.slack.com of failed" in shown.output and SECRET not in shown.output


def test_the_daemon_stays_while_an_ended_job_has_notifications_to_tell(world) -> None:
    job_id = world.submit(SPEC + "notify: {webhook: 'https://hooks.example.com/x'}\n")
    daemon = Daemon(world.store, tick_interval=1.0, idle_exit=1.0)
    with world.store.session() as session:
        session.get(Job, job_id).state = "CANCELLED"
    assert daemon._has_work()
    with world.store.session() as session:
        session.get(Job, job_id).notified_event_id = None
    assert not daemon._has_work()
