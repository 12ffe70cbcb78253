"""A job's logs through the team server: followed, no server thread is held between polls, the attempts' text is
marked again when they take turns, and the stream ends once its token is revoked; every server on one store serves
the same logs, and a log kept as a file before the store held logs is still read."""

from __future__ import annotations

import time

import anyio
from fastapi.testclient import TestClient
from server_world import Team, place_attempt

from spotrun.control.logs import legacy_log_path
from spotrun.server.app import create_app
from spotrun.server.logstream import job_log_stream_async
from spotrun.server.users import revoke_token
from spotrun.state import Attempt

AGENT = {"Authorization": "Bearer agent-token"}


def post_log(team: Team, attempt_id: int, offset: int, text: str) -> int:
    posted = team.client.post(f"/agent/v1/attempts/{attempt_id}/logs", json={"offset": offset, "data": text},
                              headers=AGENT)
    assert posted.status_code == 200, posted.text
    return offset + len(text.encode())


def test_followers_of_a_quiet_job_hold_no_thread_between_polls(team: Team) -> None:
    """Each follower of the sync stream held one of the server's threads for as long as the job ran: 40 of them
    (the pool's size) hung every other route, the agents' heartbeats included."""
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token")

    async def main() -> str:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 2
        async with anyio.create_task_group() as followers:
            for _ in range(10):
                followers.start_soon(drain, job_log_stream_async(team.store, job_id, follow=True,
                                                                 still_allowed=lambda: True, poll=0.05))
            await anyio.sleep(0.3)
            with anyio.fail_after(5):  # a route's work, in a pool of 2 threads shared with 10 followers
                answer = await anyio.to_thread.run_sync(lambda: "answered")
            followers.cancel_scope.cancel()  # the clients leave
        return answer

    assert anyio.run(main) == "answered"


async def drain(stream) -> None:
    async for _ in stream:
        pass


def test_attempts_that_take_turns_are_marked_again_when_their_text_goes_on(team: Team) -> None:
    """Followed, node 0's text written after node 1's header was shown under node 1's header."""
    job_id = team.launch("alice")
    first = place_attempt(team.store, job_id, "agent-token")
    place_attempt(team.store, job_id, "agent-2", number=2)  # a second node, running at once
    offset = post_log(team, first, 0, "node0 line A\n")
    with team.client.stream("GET", f"/api/v1/jobs/{job_id}/logs", params={"follow": True},
                            headers=team.as_user("alice")) as response:
        chunks = response.iter_text()
        seen = [next(chunks) for _ in range(3)]  # attempt 1's header and text, attempt 2's header
        assert seen[0].startswith("──── attempt 1 ·") and seen[1] == "node0 line A\n"
        assert seen[2].startswith("──── attempt 2 ·")
        post_log(team, first, offset, "node0 line B\n")
        assert next(chunks) == "──── attempt 1 (continued) ────\n"
        assert next(chunks) == "node0 line B\n"
        revoke_token(team.store, team.tokens["alice"], time.time())  # ends the stream


def test_a_followed_stream_ends_once_its_token_is_revoked(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token")
    post_log(team, attempt_id, 0, "before\n")
    with team.client.stream("GET", f"/api/v1/jobs/{job_id}/logs", params={"follow": True},
                            headers=team.as_user("alice")) as response:
        chunks = response.iter_text()
        assert "attempt 1" in next(chunks) and next(chunks) == "before\n"
        revoke_token(team.store, team.tokens["alice"], time.time())
        assert "".join(chunks) == "\n[spotrun: the token that opened this stream was revoked; it ends here]\n"


def test_two_servers_on_one_store_serve_one_log(team: Team, tmp_path, monkeypatch) -> None:
    """Each server kept the chunks it was sent under its own $SPOTRUN_HOME: the other served a log without them and
    refused the next chunk (409: a gap)."""
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token")
    other = TestClient(create_app(team.store))
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "server-a"))
    offset = post_log(team, attempt_id, 0, "to server a\n")
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "server-b"))
    answer = other.post(f"/agent/v1/attempts/{attempt_id}/logs", json={"offset": offset, "data": "to server b\n"},
                        headers=AGENT)
    assert answer.status_code == 200, answer.text
    for server in (team.client, other):
        log = server.get(f"/api/v1/jobs/{job_id}/attempts/1/log", headers=team.as_user("alice"))
        assert log.text == "to server a\nto server b\n"


def test_a_log_written_as_a_file_before_the_store_kept_logs_is_read_and_goes_on(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token")
    file = legacy_log_path(job_id, 1)
    file.parent.mkdir(parents=True)
    file.write_bytes("before the upgrade\n".encode())
    with team.store.session() as session:
        session.get(Attempt, attempt_id).log_bytes = file.stat().st_size  # what the server recorded then
    post_log(team, attempt_id, file.stat().st_size, "after it\n")
    log = team.client.get(f"/api/v1/jobs/{job_id}/attempts/1/log", params={"offset": 7}, headers=team.as_user("alice"))
    assert log.text == "the upgrade\nafter it\n"
