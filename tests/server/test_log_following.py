"""A job's logs through the team server: followed, no server thread is held between polls, the attempts' text is
marked again when they take turns, and the stream ends once its token is revoked; every server on one store serves
the same logs, and a log kept as a file before the store held logs is still read."""

from __future__ import annotations

import time

import anyio
import pytest
from fastapi.testclient import TestClient
from server_world import Team, place_attempt
from typer.testing import CliRunner

from spotrun.cli.main import app as cli
from spotrun.cli.remote import RemoteBackend
from spotrun.control.log_retention import prune_logs
from spotrun.control.logs import legacy_log_path
from spotrun.server.app import create_app
from spotrun.server.logstream import job_log_stream_async
from spotrun.server.users import revoke_token
from spotrun.state import Attempt, Job

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


def test_an_attempts_pruned_log_is_answered_with_when_it_was_removed(team: Team) -> None:
    """It answered 200, no bytes and `X-Log-Size: 0`: nothing said the log had been removed."""
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token")
    post_log(team, attempt_id, 0, "hello\n")
    whole = team.client.get(f"/api/v1/jobs/{job_id}/attempts/1/log", headers=team.as_user("alice"))
    assert whole.text == "hello\n" and "X-Log-Pruned-At" not in whole.headers
    with team.store.session() as session:
        session.get(Job, job_id).state, session.get(Job, job_id).finished_at = "SUCCEEDED", 1_000.0
    prune_logs(team.store, ended_before=2_000.0, now=1_800_000_000.5)

    pruned = team.client.get(f"/api/v1/jobs/{job_id}/attempts/1/log", headers=team.as_user("alice"))

    assert pruned.status_code == 200 and pruned.text == "" and pruned.headers["X-Log-Size"] == "0"
    assert float(pruned.headers["X-Log-Pruned-At"]) == 1_800_000_000.5


def test_spotrun_logs_f_cut_off_by_a_revoke_exits_non_zero(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """It printed the server's last line and exited 0, as for a job that ended."""
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-token")
    post_log(team, attempt_id, 0, "before\n")

    class RevokedWhileFollowed(RemoteBackend):
        def log_stream(self, job_id: int, *, follow: bool):
            for text in super().log_stream(job_id, follow=follow):
                yield text
                if text == "before\n":  # read: the stream is open
                    revoke_token(team.store, team.tokens["alice"], time.time())

    client = TestClient(team.client.app)
    monkeypatch.setattr("spotrun.cli.main.current_backend",
                        lambda: RevokedWhileFollowed("http://testserver", team.tokens["alice"], client=client))
    result = CliRunner().invoke(cli, ["logs", "-f", str(job_id)], env={"COLUMNS": "300"})

    assert result.stdout.endswith("before\n\n[spotrun: the token that opened this stream was revoked; it ends here]\n")
    assert result.exit_code == 1, result.output
    assert "the token in SPOTRUN_TOKEN was revoked" in result.stderr, result.stderr
