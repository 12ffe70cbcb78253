"""The fakes answer as the real metadata services do, so the sources are tested against the protocols."""

from __future__ import annotations

import time

import httpx
import pytest

from .cloud_polling import wait_until


def test_imds_wants_a_session_token(imds):
    with httpx.Client(base_url=imds.url) as client:
        assert client.get("/latest/meta-data/spot/instance-action").status_code == 401
        assert client.put("/latest/api/token").status_code == 400  # no TTL
        too_long = {"X-aws-ec2-metadata-token-ttl-seconds": "21601"}
        assert client.put("/latest/api/token", headers=too_long).status_code == 400
        token_answer = client.put("/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        assert token_answer.status_code == 200 and token_answer.headers["X-aws-ec2-metadata-token-ttl-seconds"] == "60"
        with_token = {"X-aws-ec2-metadata-token": token_answer.text}
        assert client.get("/latest/meta-data/spot/instance-action", headers=with_token).status_code == 404
        imds.announce_interruption("stop", reclaim_after=120)
        action = client.get("/latest/meta-data/spot/instance-action", headers=with_token).json()
        assert action["action"] == "stop" and action["time"].endswith("Z")
        imds.expire_tokens()
        assert client.get("/latest/meta-data/spot/instance-action", headers=with_token).status_code == 401
    assert imds.request_count() == 7 and imds.tokens_issued == 3 and imds.unauthorized_answers == 2


def test_gce_wants_the_flavor_header_and_long_polls(gce):
    flavor = {"Metadata-Flavor": "Google"}
    with httpx.Client(base_url=gce.url + "/computeMetadata/v1/instance") as client:
        assert client.get("/preempted").status_code == 403
        answer = client.get("/preempted", headers=flavor)
        assert (answer.text, answer.headers["Metadata-Flavor"]) == ("FALSE", "Google")
        started = time.monotonic()
        unchanged = client.get("/preempted", headers=flavor, params={"wait_for_change": "true", "timeout_sec": "1"})
        assert unchanged.text == "FALSE" and 0.9 < time.monotonic() - started < 5.0
        gce.preempt(at=time.time() + 0.2)
        started = time.monotonic()
        changed = client.get(
            "/preempted", headers=flavor,
            params={"wait_for_change": "true", "timeout_sec": "30", "last_etag": answer.headers["ETag"]},
        )
        assert changed.text == "TRUE" and 0.1 < time.monotonic() - started < 5.0
        stale = client.get("/preempted", headers=flavor, params={"wait_for_change": "true", "last_etag": "stale"})
        assert stale.text == "TRUE"  # a different ETag answers at once
    assert gce.long_polls() == 3


def test_azure_wants_the_metadata_header_and_an_api_version(azure):
    path = "/metadata/scheduledevents"
    version = {"api-version": "2020-07-01"}
    with httpx.Client(base_url=azure.url) as client:
        assert client.get(path, params=version).status_code == 400
        assert client.get(path, headers={"Metadata": "true"}).status_code == 400
        assert client.get(path, params=version, headers={"Metadata": "true"}).json()["Events"] == []
        event = azure.schedule_event("Preempt", resources=["vm-7"], not_before_in=30)
        (listed,) = client.get(path, params=version, headers={"Metadata": "true"}).json()["Events"]
        assert (listed["EventId"], listed["EventType"], listed["Resources"]) == (event.event_id, "Preempt", ["vm-7"])
        assert listed["NotBefore"].endswith(" GMT") and listed["EventStatus"] == "Scheduled"
        started = client.post(path, params=version, headers={"Metadata": "true"},
                              json={"StartRequests": [{"EventId": event.event_id}]})
        assert started.status_code == 200 and azure.acknowledged == [event.event_id]
        (listed,) = client.get(path, params=version, headers={"Metadata": "true"}).json()["Events"]
        assert (listed["EventStatus"], listed["NotBefore"]) == ("Started", "")


def test_breakers_and_close(imds):
    with httpx.Client(base_url=imds.url) as client:
        imds.fail_with_status(503)
        assert client.put("/latest/api/token").status_code == 503
        imds.answer_garbage()
        assert client.put("/latest/api/token").status_code == 200
        imds.drop_connections()
        with pytest.raises(httpx.RemoteProtocolError):
            client.put("/latest/api/token")
        imds.repair()
        assert client.put("/latest/api/token").status_code == 400
    imds.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(imds.url + "/latest/api/token")
    assert imds.request_count("/latest/api/token", "PUT") == 4


def test_a_notice_scheduled_for_later_appears_then(gce):
    with httpx.Client(base_url=gce.url, headers={"Metadata-Flavor": "Google"}) as client:
        gce.preempt(at=time.time() + 0.5)  # once the client is made (slow on a loaded machine): the answer comes first
        assert client.get("/computeMetadata/v1/instance/preempted").text == "FALSE"
        wait_until(lambda: client.get("/computeMetadata/v1/instance/preempted").text == "TRUE", timeout=2.0, step=0.05)
