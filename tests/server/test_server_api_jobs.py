"""The user API on SQLite and PostgreSQL: launch, list, one job with attempts and bill, events, logs, cancel, cost."""

from __future__ import annotations

import time

import pytest
from server_world import TINY_JOB, Team, place_attempt
from sqlalchemy import update

from spotrun.control import records
from spotrun.state import Attempt, Event, Job, add_event


def test_launched_job_is_owned_by_the_caller_and_listed(team: Team) -> None:
    response = team.client.post("/api/v1/jobs", json={"spec": TINY_JOB}, headers=team.as_user("alice"))
    assert response.status_code == 201
    assert response.json() == {"id": 1, "name": "tiny", "owner": "alice"}
    with team.store.session() as session:
        assert session.get(Job, 1).owner == "alice"
    rows = team.client.get("/api/v1/jobs", headers=team.as_user("alice")).json()
    assert [(row["id"], row["state"], row["owner"]) for row in rows] == [(1, "PENDING", "alice")]


def test_a_job_without_a_name_is_named_after_its_file(team: Team) -> None:
    text = 'run: "true"\nresources: {cloud: local, instance_type: local.cpu}\n'
    response = team.client.post(
        "/api/v1/jobs", json={"spec": text, "source": "jobs/nightly.yaml"}, headers=team.as_user("alice")
    )
    assert response.json()["name"] == "nightly"


def test_one_job_comes_with_its_attempts_and_bill(team: Team) -> None:
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token", at=1000.0)
    detail = team.client.get(f"/api/v1/jobs/{job_id}", headers=team.as_user("alice")).json()
    assert detail["owner"] == "alice"
    assert detail["job"]["id"] == job_id and detail["job"]["attempts"] == 1
    assert [(a["number"], a["market"], a["instance_id"]) for a in detail["attempts"]] == [(1, "spot", f"i-{job_id}-1")]
    assert detail["bill"]["spot_seconds"] > 0 and detail["bill"]["on_demand_cost"] > detail["bill"]["cost"]


def test_each_attempt_comes_with_its_cost_as_charged_and_they_add_up_to_the_bill(team: Team) -> None:
    """The dashboard's Cost column shows these: the ledger's rule, once, on the server."""
    job_id = team.launch("alice")
    free = place_attempt(team.store, job_id, "agent-1", at=1000.0)
    with team.store.session() as session:  # EC2 took it back in its first hour: 1200 s held, none charged
        attempt = session.get(Attempt, free)
        records.end_attempt(session, attempt, reason="preempted", ended_at=2200.0, billed_seconds=1200.0)
        attempt.charged_seconds, attempt.notice_at, attempt.reclaim_at = 0.0, 2080.0, 2200.0
    short = place_attempt(team.store, job_id, "agent-2", number=2, at=3000.0)
    with team.store.session() as session:  # held 20 s, charged the minute
        attempt = session.get(Attempt, short)
        records.end_attempt(session, attempt, reason="preempted", ended_at=3020.0, billed_seconds=20.0)
        attempt.charged_seconds = 60.0
    before = time.time()
    place_attempt(team.store, job_id, "agent-3", number=3, at=before - 3600.0)
    detail = team.client.get(f"/api/v1/jobs/{job_id}", headers=team.as_user("alice")).json()
    after = time.time()
    first, second, running = detail["attempts"]
    assert (first["cost"], first["charged_seconds"], first["reclaim_at"]) == (0.0, 0.0, 2200.0)
    assert second["cost"] == pytest.approx(60 / 3600 * 0.1, abs=1e-12)
    assert 3600 / 3600 * 0.1 <= running["cost"] <= (after - before + 3600) / 3600 * 0.1  # held so far
    assert running["reclaim_at"] is None
    assert sum(a["cost"] for a in detail["attempts"]) == pytest.approx(detail["bill"]["cost"], abs=1e-6)


def test_events_after_an_id_are_only_the_newer_ones(team: Team) -> None:
    job_id = team.launch("alice")
    headers = team.as_user("alice")
    first = team.client.get(f"/api/v1/jobs/{job_id}/events", headers=headers).json()
    assert [e["message"] for e in first] == ["submitted job 'tiny'"]
    assert team.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers).status_code == 202
    newer = team.client.get(f"/api/v1/jobs/{job_id}/events", params={"after": first[-1]["id"]}, headers=headers).json()
    assert [e["kind"] for e in newer] == ["cancel_requested"]


def placed_then_ended(team: Team, reason: str, seconds: float) -> tuple[dict, dict]:
    """Alice's job with one attempt that got an instance at t=1000 and ended `seconds` later for `reason`: the
    attempt and its end's event, as the API shows them."""
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token", at=1000.0)
    with team.store.session() as session:
        records.end_attempt(session, session.get(Attempt, attempt_id), reason=reason, ended_at=1000.0 + seconds,
                            billed_seconds=seconds)
    headers = team.as_user("alice")
    [attempt] = team.client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()["attempts"]
    return attempt, team.client.get(f"/api/v1/jobs/{job_id}/events", headers=headers).json()[-1]


def test_events_carry_their_fields_as_data(team: Team) -> None:
    """What `launch --follow` folds by (cli/refusals.py), through a team server too."""
    _, ended = placed_then_ended(team, "preempted", 60.0)
    assert ended["kind"] == "attempt_ended" and ended["data"] == {
        "reason": "preempted", "billed_seconds": 60.0, "market": "spot", "zone": "local-a", "placed": True}


def test_a_node_given_back_at_once_had_an_instance_in_its_attempt_and_in_its_event(team: Team) -> None:
    """Released in the tick it was launched, billed 0 s: still not a try without an instance."""
    attempt, ended = placed_then_ended(team, "released", 0.0)
    assert ended["kind"] == "attempt_ended" and ended["data"]["reason"] == "released"
    assert attempt["no_instance"] is False and ended["no_instance"] is False


def test_a_client_that_keeps_the_settled_tries_is_sent_only_the_rest(team: Team) -> None:
    """A job that waited long for spot: tries 2-5 refused (settled once ended), 6 still launching, 7 running."""
    job_id = team.launch("alice")
    first = place_attempt(team.store, job_id, "agent-1", number=1, at=1000.0)
    with team.store.session() as session:
        records.end_attempt(session, session.get(Attempt, first), reason="preempted", ended_at=1100.0,
                            billed_seconds=100.0)
        for number in range(2, 7):
            session.add(Attempt(
                job_id=job_id, number=number, state="ended" if number < 6 else "launching", provider="local",
                zone="local-b", market="spot", instance_type="local.cpu", price_per_hour=0.1,
                on_demand_price_per_hour=0.4, client_token=f"ct-wait-{number}", token_hash="-",
                created_at=1100.0 + number, ended_at=1100.0 + number if number < 6 else None,
                end_reason="no_capacity" if number < 6 else None,
            ))
    place_attempt(team.store, job_id, "agent-7", number=7, at=1200.0)

    def numbers(**params: int) -> list[int]:
        answer = team.client.get(f"/api/v1/jobs/{job_id}", params=params, headers=team.as_user("alice"))
        assert answer.status_code == 200, answer.text
        return [a["number"] for a in answer.json()["attempts"]]

    whole = team.client.get(f"/api/v1/jobs/{job_id}", headers=team.as_user("alice")).json()
    assert [a["number"] for a in whole["attempts"] if a["no_instance"]] == [2, 3, 4, 5]
    assert numbers() == numbers(settled_below=0) == [1, 2, 3, 4, 5, 6, 7]
    assert numbers(settled_below=5) == [1, 5, 6, 7]  # the placed one and the open try are always sent
    assert numbers(settled_below=100) == [1, 6, 7]
    refused = team.client.get(f"/api/v1/jobs/{job_id}", params={"settled_below": -1}, headers=team.as_user("alice"))
    assert refused.status_code == 422 and "settled_below" in refused.text


def test_logs_by_attempt_and_offset_and_as_one_stream(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token")
    agent = {"Authorization": "Bearer agent-token"}
    for offset, data in ((0, "épоch 1\n"), (len("épоch 1\n".encode()), "epoch 2\n")):
        posted = team.client.post(f"/agent/v1/attempts/{attempt_id}/logs", json={"offset": offset, "data": data},
                                  headers=agent)
        assert posted.status_code == 200, posted.text
    headers = team.as_user("alice")
    whole = team.client.get(f"/api/v1/jobs/{job_id}/attempts/1/log", headers=headers)
    assert whole.content.decode() == "épоch 1\nepoch 2\n"
    size = int(whole.headers["X-Log-Size"])
    later = team.client.get(f"/api/v1/jobs/{job_id}/attempts/1/log", params={"offset": size - 8}, headers=headers)
    assert later.text == "epoch 2\n" and later.headers["X-Log-Size"] == str(size)
    past = team.client.get(f"/api/v1/jobs/{job_id}/attempts/1/log", params={"offset": size + 100}, headers=headers)
    assert past.text == "" and past.headers["X-Log-Size"] == str(size)  # not the offset asked: bytes would be skipped
    assert team.client.get(f"/api/v1/jobs/{job_id}/attempts/2/log", headers=headers).status_code == 404

    stream = team.client.get(f"/api/v1/jobs/{job_id}/logs", headers=headers).text
    header, body = stream.split("\n", 1)
    assert header.startswith(f"──── attempt 1 · spot · local-a · i-{job_id}-1 · started ")
    assert body == "épоch 1\nepoch 2\n"


def test_following_logs_streams_until_the_job_ends(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token")
    team.client.post(f"/agent/v1/attempts/{attempt_id}/logs", json={"offset": 0, "data": "hello\n"},
                     headers={"Authorization": "Bearer agent-token"})
    with team.client.stream("GET", f"/api/v1/jobs/{job_id}/logs", params={"follow": True},
                            headers=team.as_user("alice")) as response:
        chunks = response.iter_text()
        assert "attempt 1" in next(chunks)
        assert next(chunks) == "hello\n"
        with team.store.session() as session:
            session.get(Job, job_id).state = "SUCCEEDED"  # what the controller records when the job ends
        assert list(chunks) == []  # the response ends once the job has


def test_cancel_twice_is_a_conflict_the_second_time(team: Team) -> None:
    job_id = team.launch("alice")
    headers = team.as_user("alice")
    assert team.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers).json() == {
        "job_id": job_id, "cancel_requested": True
    }
    with team.store.session() as session:
        session.get(Job, job_id).state = "CANCELLED"
    again = team.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers)
    assert again.status_code == 409 and again.json()["detail"] == f"job {job_id} has already ended"


def test_preempting_a_job_without_an_instance_is_a_conflict(team: Team) -> None:
    job_id = team.launch("alice")
    response = team.client.post(f"/api/v1/jobs/{job_id}/preempt", json={}, headers=team.as_user("alice"))
    assert response.status_code == 409
    assert "holds no running instance" in response.json()["detail"]


def test_preempting_a_node_the_job_does_not_hold_names_the_node(team: Team) -> None:
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token", at=1000.0)  # node 0 only
    response = team.client.post(f"/api/v1/jobs/{job_id}/preempt", json={"node": 3}, headers=team.as_user("alice"))
    assert response.status_code == 409 and response.json()["detail"] == (
        f"job {job_id} has 1 node: there is no node 3 (only node 0)")
    bad = team.client.post(f"/api/v1/jobs/{job_id}/preempt", json={"node": -1}, headers=team.as_user("alice"))
    assert bad.status_code == 422


def test_cost_names_the_job_and_its_bill(team: Team) -> None:
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token", at=1000.0)
    cost = team.client.get(f"/api/v1/jobs/{job_id}/cost", headers=team.as_user("alice")).json()
    assert (cost["job_id"], cost["name"], cost["state"]) == (job_id, "tiny", "PENDING")
    assert cost["bill"]["saved"] == cost["bill"]["on_demand_cost"] - cost["bill"]["cost"] > 0


def test_unknown_job_is_404_and_health_says_ok(team: Team) -> None:
    missing = team.client.get("/api/v1/jobs/999", headers=team.as_user("root"))
    assert missing.status_code == 404 and missing.json() == {"detail": "no job with id 999"}
    assert team.client.get("/healthz").json() == {"ok": True, "database": "ok"}


@pytest.mark.parametrize("number", ["NaN", "1e400", "-Infinity"])
def test_a_number_json_cannot_hold_is_refused_with_a_422_that_names_it(team: Team, number: str) -> None:
    """Python's JSON reader takes NaN and Infinity; FastAPI's 422 echoed them back, which JSON cannot write: a 500."""
    job_id = team.launch("alice")
    response = team.client.post(
        f"/api/v1/jobs/{job_id}/preempt", content=f'{{"notice_seconds": {number}}}',
        headers={**team.as_user("alice"), "content-type": "application/json"},
    )
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "notice_seconds"] and error["msg"] == "Input should be a finite number"
    with team.store.session() as session:
        assert session.get(Job, job_id).state == "PENDING"


def _chaos_events(team: Team, job_id: int) -> list[str]:
    with team.store.session() as session:
        return [event.message for event in session.query(Event).filter_by(job_id=job_id, kind="chaos")]


def test_preempting_an_on_demand_instance_is_refused_and_stores_nothing(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token", at=1000.0)
    with team.store.session() as session:
        session.get(Attempt, attempt_id).market = "on-demand"
    response = team.client.post(f"/api/v1/jobs/{job_id}/preempt", json={}, headers=team.as_user("alice"))
    assert response.status_code == 409 and "an on-demand instance" in response.json()["detail"]
    assert _chaos_events(team, job_id) == []


def test_a_preemption_the_cloud_refuses_is_a_conflict_recorded_with_its_answer(team: Team) -> None:
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token", at=1000.0)  # i-1-1: the local cloud has no such instance
    response = team.client.post(f"/api/v1/jobs/{job_id}/preempt", json={}, headers=team.as_user("alice"))
    assert response.status_code == 409 and "no local instance" in response.json()["detail"]
    requested, refused = _chaos_events(team, job_id)
    assert "requested by the user" in requested and refused.startswith(f"preemption of i-{job_id}-1 not done: ")


@pytest.mark.parametrize("notice", [float("nan"), -1.0, 3601.0, float("inf")])
def test_a_notice_out_of_range_is_refused_before_anything_is_stored(team: Team, notice: float) -> None:
    from spotrun.control import jobs

    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token", at=1000.0)
    with pytest.raises(jobs.PreemptRefused, match="the notice must be between 0 and 3600 seconds"):
        jobs.preempt(team.store, job_id, time.time(), notice)
    assert _chaos_events(team, job_id) == []


@pytest.mark.parametrize("after", [2**31 - 1, 2**31, 2**63 - 1])
def test_events_after_an_id_past_any_stored_one_are_none_not_a_500(team: Team, after: int) -> None:
    """The route takes `after` up to 2**63 - 1; PostgreSQL refused to compare its 32-bit ids with more."""
    job_id = team.launch("alice")
    response = team.client.get(f"/api/v1/jobs/{job_id}/events", params={"after": after}, headers=team.as_user("alice"))
    assert (response.status_code, response.json()) == (200, [])


def test_a_cancel_that_races_the_jobs_end_is_refused(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller ended the job between the cancel's read and its write: the cancel answered 202, and a
    "cancel requested" followed the job's end."""
    from spotrun.control import jobs as jobs_api

    job_id = team.launch("alice")
    real_get_job, reads = jobs_api.get_job, []

    def read_then_the_controller_ends_it(session, wanted):
        job = real_get_job(session, wanted)
        reads.append(job.state)
        if len(reads) == 2:  # the first read is the route's check of the owner; the second, the cancel's own
            with team.store.session() as controller:
                controller.get(Job, job_id).state = "SUCCEEDED"
        return job

    monkeypatch.setattr(jobs_api, "get_job", read_then_the_controller_ends_it)
    response = team.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=team.as_user("alice"))
    assert response.status_code == 409, response.text
    with team.store.session() as session:
        assert session.get(Job, job_id).state == "SUCCEEDED"
        kinds = [e.kind for e in session.query(Event).filter(Event.job_id == job_id).order_by(Event.id)]
    assert "cancel_requested" not in kinds


def test_the_log_streams_attempt_header_says_the_date_and_its_zone(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server writes the remote `spotrun logs` header; it gave the start in the server's zone, unnamed, beside
    `spotrun status JOB` giving the same start in the user's."""
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-1", at=1_700_000_000.0)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        log = team.client.get(f"/api/v1/jobs/{job_id}/logs", headers=team.as_user("alice")).text
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert "started 2023-11-14 22:13:20 UTC" in log, log


def test_a_follower_misses_no_event_committed_after_a_later_ones(team: Team) -> None:
    """PostgreSQL numbers an event as it is inserted: a transaction holding the smaller id can commit after another
    holding a larger one. A follower that read the larger and moved its cursor past it never saw the other. Events'
    own times do not tell (an attempt's end is stamped with the cloud's earlier time; a writer's clock may be off)."""
    if team.store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite writes one transaction at a time: its ids become visible in order")
    job_id = team.launch("alice")

    def follow(after: int) -> list[tuple[int, str]]:
        url = f"/api/v1/jobs/{job_id}/events"
        events = team.client.get(url, params={"after": after}, headers=team.as_user("alice")).json()
        return [(e["id"], e["message"]) for e in events]

    last = follow(0)[-1][0]
    slow = team.store._sessions()  # takes its id first, commits last
    try:
        add_event(slow, at=time.time(), kind="state", job_id=job_id, message="slow")
        slow.flush()
        for at, message in ((time.time() - 600, "stamped earlier"), (time.time() + 600, "stamped later")):
            with team.store.session() as fast:
                add_event(fast, at=at, kind="state", job_id=job_id, message=message)
        assert follow(last) == []  # they wait for the id before them
        slow.commit()
    finally:
        slow.close()
    assert follow(last) == [(last + 1, "slow"), (last + 2, "stamped earlier"), (last + 3, "stamped later")]
    rolled_back = team.store._sessions()
    try:
        add_event(rolled_back, at=time.time(), kind="state", job_id=job_id, message="never")
        rolled_back.flush()
        rolled_back.rollback()
    finally:
        rolled_back.close()
    with team.store.session() as later:
        add_event(later, at=time.time(), kind="state", job_id=job_id, message="after a gap no open writer holds")
    assert follow(last + 3) == [(last + 5, "after a gap no open writer holds")]


def test_an_ended_jobs_events_are_all_given_though_a_writer_holds_a_smaller_id(team: Team) -> None:
    """A follower stops at the job's end (`spotrun launch --follow`): another job's open transaction, holding a
    smaller id, kept the ended job's last events from it."""
    if team.store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite writes one transaction at a time")
    job_id, other = team.launch("alice"), team.launch("alice")
    last = max(e["id"] for e in team.client.get(f"/api/v1/jobs/{job_id}/events", headers=team.as_user("alice")).json())
    open_writer = team.store._sessions()
    try:
        add_event(open_writer, at=time.time(), kind="state", job_id=other, message="another job's tick")
        open_writer.flush()
        with team.store.session() as session:
            session.get(Job, job_id).state = "SUCCEEDED"
            add_event(session, at=time.time(), kind="state", job_id=job_id, message="RUNNING -> SUCCEEDED")
        events = team.client.get(f"/api/v1/jobs/{job_id}/events", params={"after": last},
                                 headers=team.as_user("alice")).json()
        assert [e["message"] for e in events] == ["RUNNING -> SUCCEEDED"]
    finally:
        open_writer.rollback()
        open_writer.close()


def test_a_gap_is_held_only_for_writers_open_when_it_was_seen_and_not_for_ever(team: Team, monkeypatch) -> None:
    """Any writer open anywhere held a gap back (a heartbeat, another job's tick, an idle psql): on a busy server a
    rolled-back id held every live job's events indefinitely."""
    if team.store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite writes one transaction at a time")
    from spotrun.state import event_order

    job_id = team.launch("alice")

    def follow(after: int) -> list[str]:
        url = f"/api/v1/jobs/{job_id}/events"
        return [e["message"] for e in team.client.get(url, params={"after": after}, headers=team.as_user("alice")).json()]

    last = max(e["id"] for e in team.client.get(f"/api/v1/jobs/{job_id}/events", headers=team.as_user("alice")).json())
    holder = team.store._sessions()  # holds the gap's id, open across the first sighting
    add_event(holder, at=time.time(), kind="state", job_id=job_id, message="held")
    holder.flush()
    with team.store.session() as session:
        add_event(session, at=time.time(), kind="state", job_id=job_id, message="past the gap")
    assert follow(last) == []  # seen: held while its holder is open
    holder.rollback()
    holder.close()
    later = team.store._sessions()  # a writer that began after the sighting cannot hold the gap's id
    try:
        later.execute(update(Job).where(Job.id == job_id).values(name=Job.name))
        assert follow(last) == ["past the gap"]
    finally:
        later.rollback()
        later.close()
    stuck = team.store._sessions()  # a writer open for ever holds a new gap no longer than MAX_HOLD_SECONDS
    try:
        add_event(stuck, at=time.time(), kind="state", job_id=job_id, message="never committed")
        stuck.flush()
        with team.store.session() as session:
            add_event(session, at=time.time(), kind="state", job_id=job_id, message="past the second gap")
        assert follow(last) == ["past the gap"]
        monkeypatch.setattr(event_order, "MAX_HOLD_SECONDS", 0.0)
        assert follow(last) == ["past the gap", "past the second gap"]
    finally:
        stuck.rollback()
        stuck.close()


@pytest.mark.parametrize(("body", "field"), [
    ({"notice_seconds": "5"}, "notice_seconds"), ({"node": "0"}, "node"), ({"node": 0.0}, "node"),
    ({"notice_seconds": True}, "notice_seconds"),
])
def test_a_preempt_value_of_another_json_type_is_refused_not_converted(team: Team, body: dict, field: str) -> None:
    """`"notice_seconds": "5"` was taken for 5 seconds, and the instance preempted: the user API's bodies are strict,
    as `is_admin` is (only true makes an admin). Numbers as the CLI sends them pass."""
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token", at=1000.0)
    response = team.client.post(f"/api/v1/jobs/{job_id}/preempt", json=body, headers=team.as_user("alice"))
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", field], error
    assert _chaos_events(team, job_id) == []
    sent_as_the_cli_does = team.client.post(f"/api/v1/jobs/{job_id}/preempt", json={"notice_seconds": 5, "node": 0},
                                            headers=team.as_user("alice"))
    assert sent_as_the_cli_does.status_code == 409 and "no local instance" in sent_as_the_cli_does.text  # i-1-1: none
