"""An agent whose controller worker is gone reports to another it knows of (`agent.client.Controllers`): from its
boot configuration, then from the answers to its heartbeats (`state.workers`)."""

from __future__ import annotations

import threading

from spotrun.agent.client import Controllers, ControllerClient, Delivery
from spotrun.agent.heartbeat import Heartbeat

from .conftest import ATTEMPT_ID, TOKEN, ControllerServer, RecordingController, free_port


def client_for(url: str, *, alternates: tuple[str, ...] = ()) -> ControllerClient:
    return ControllerClient(url, TOKEN, ATTEMPT_ID, alternates=alternates, request_timeout=2.0, backoff_initial=0.01,
                            backoff_max=0.05)


def test_a_report_the_first_controller_cannot_take_goes_to_the_next_and_stays_there(controller: RecordingController):
    gone = f"http://127.0.0.1:{free_port()}"
    client = client_for(gone, alternates=(controller.url,))
    assert client.post("started", {"address": "a"}) is Delivery.DELIVERED
    assert client.post("heartbeat", {}, retry=False) is Delivery.DELIVERED  # no try at the gone one first
    assert [r.endpoint for r in controller.requests] == ["started", "heartbeat"]


def test_a_controller_answering_5xx_is_left_for_the_next(controller: RecordingController):
    failing = RecordingController(fail_before={"heartbeat": 100})
    server = ControllerServer(failing)
    try:
        client = client_for(failing.url, alternates=(controller.url,))
        assert client.post("heartbeat", {}) is Delivery.DELIVERED
    finally:
        server.close()
    assert failing.fail_before["heartbeat"] == 99 and len(controller.of("heartbeat")) == 1


def test_an_agent_learns_the_workers_from_its_heartbeats_answers_and_fails_over_to_one(controller):
    gone = RecordingController()
    server = ControllerServer(gone)
    gone.replies["heartbeat"] = {"controllers": [gone.url, controller.url]}
    heartbeat = Heartbeat(client_for(gone.url), 0.05, lambda: None).start()
    try:
        gone.wait_for(lambda: len(gone.of("heartbeat")) >= 1, timeout=5)
        server.close()
        controller.wait_for(lambda: len(controller.of("heartbeat")) >= 2, timeout=5)
    finally:
        heartbeat.stop()
        server.close()


def test_a_failure_seen_by_several_threads_at_once_moves_on_once():
    controllers = Controllers("http://a", ["http://b", "http://c"])
    threads = [threading.Thread(target=controllers.failed, args=("http://a",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert controllers.current() == "http://b"
    controllers.failed("http://a")  # a late report of the old failure changes nothing
    assert controllers.current() == "http://b"


def test_the_current_controller_stays_first_when_an_answer_names_the_workers():
    controllers = Controllers("http://a/")
    controllers.learn(["http://b", "http://a", "https://c/"])
    assert controllers.current() == "http://a"
    controllers.failed("http://a")
    assert controllers.current() == "http://b"
    controllers.failed("http://b")
    assert controllers.current() == "https://c"


def test_a_malformed_list_of_workers_is_ignored():
    controllers = Controllers("http://a", ["http://b"])
    for malformed in (None, "http://c", ["http://c", 3], ["ftp://c"], {"url": "http://c"}):
        controllers.learn(malformed)
    controllers.failed("http://a")
    assert controllers.current() == "http://b"
