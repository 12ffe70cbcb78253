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
from spotrun.policy import Keep, Launch
from spotrun.server.daemon import Daemon
from spotrun.server.views import job_detail
from spotrun.spec import parse_spec
from spotrun.state import Job
from gang_world import DEADLINE_GANG, open_by_rank, ranks_saved_and_stopped, report_in, standing_by
from gang_world import alive_for as gang_alive_for
from memory_cloud import ZONES
from webhook_server import WebhookServer
from world import DEADLINE_SPEC, SPEC, alive_for

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
    assert "(on-demand in m-c)" in fell_back["message"] and fell_back["state"] == "RUNNING"
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
    job_id = jobs.submit(EmbeddedBackend().store, spec, 1.0, local_zones=ZONES)  # SPEC's, of the in-memory cloud
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


# ---- fell_back and back_to_spot: only once the job runs there ------------------------------------------------

EVERY_HAPPENING = ("notify: {webhook: 'https://hooks.example.com/x', events: [succeeded, failed, cancelled, preempted, "
                   "fell_back, back_to_spot]}\n")


def told_to_a_webhook(world) -> list[dict]:
    """The bodies the world's controller posts, in order (its deliveries run in its tick)."""
    told: list[dict] = []

    def post(url: str, payload: dict) -> webhooks.Outcome:
        told.append(payload)
        return webhooks.TOLD

    world.controller.notifier = Notifier(world.store, world.clock.now, worker_id=None, claim_ttl=30.0, post=post,
                                         start=at_once)
    return told


def on_demand_standby_launched(world, scripted) -> tuple[list[dict], int, str]:
    """A job running on spot whose policy moved it to on-demand (a standby launched, not yet run on): the bodies
    told, the job, and its spot instance."""
    told = told_to_a_webhook(world)
    job_id = world.submit(DEADLINE_SPEC + EVERY_HAPPENING)
    old = world.run_to_running(job_id)
    scripted.answer = Launch("m-b", "on-demand", "the deadline is near")
    alive_for(world, old, 61)
    scripted.answer = Keep("fine")
    return told, job_id, old


def test_an_on_demand_standby_given_up_is_no_fallback_and_the_spot_attempt_after_it_no_return(world, scripted) -> None:
    told, job_id, old = on_demand_standby_launched(world, scripted)
    standby = world.attempts(job_id)[1]
    assert (standby.market, standby.standby_for) == ("on-demand", world.attempts(job_id)[0].id)
    alive_for(world, old, 80)  # its agent never reports in: the move is given up, the job stays on spot
    assert world.attempts(job_id)[1].end_reason == "lost" and world.job(job_id).state == "RUNNING"

    world.cloud.reclaim(old)
    world.tick()
    again = world.run_to_running(job_id)  # placed on spot again
    world.agent(again)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick()
    assert [a.market for a in world.attempts(job_id)] == ["spot", "on-demand", "spot"]
    assert [body["event"] for body in told] == ["preempted", "succeeded"]


def test_an_on_demand_standby_that_takes_over_is_a_fallback_told_once_the_job_runs_on_it(world, scripted) -> None:
    told, job_id, old = on_demand_standby_launched(world, scripted)
    new = world.agent(world.attempts(job_id)[1].instance_id)
    new("started", {})
    world.tick()  # the old attempt is asked to stop
    assert told == [], "launched, not yet run on"
    world.agent(old)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()  # the standby takes over
    new("heartbeat", {})
    world.tick()
    assert world.job(job_id).state == "RUNNING" and world.attempts(job_id)[0].end_reason == "migrated"
    assert [body["event"] for body in told] == ["fell_back"]
    assert "(on-demand in m-b)" in told[0]["message"]


def test_a_gang_tells_its_fallback_once_its_nodes_run_on_demand_not_for_a_move_given_up(world, scripted) -> None:
    told = told_to_a_webhook(world)
    scripted.answer = Keep("spot is fine")
    world.submit(DEADLINE_GANG + EVERY_HAPPENING)
    world.tick()
    report_in(world)
    world.tick()
    nodes = open_by_rank(world)

    scripted.answer = Launch("m-b", "on-demand", "the deadline is near")
    gang_alive_for(world, nodes, 61)
    standbys = standing_by(world)
    assert {a.market for a in standbys.values()} == {"on-demand"}
    world.cloud.reclaim(standbys[1].instance_id)  # one standby lost: the move is given up, the gang stays on spot
    world.tick()
    assert not standing_by(world) and told == []

    gang_alive_for(world, nodes, 81)  # the next move waits boot_timeout after the last given up
    standbys = standing_by(world)
    assert sorted(standbys) == [0, 1, 2]
    scripted.answer = Keep("fine")
    report_in(world, attempts=standbys)
    world.tick()
    ranks_saved_and_stopped(world, nodes)
    world.tick()
    assert {a.market for a in open_by_rank(world).values()} == {"on-demand"} and world.job(1).state == "RUNNING"
    assert [body["event"] for body in told] == ["fell_back"]
