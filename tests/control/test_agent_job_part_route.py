"""The job's run, setup, workdir and env stay out of the user data the cloud keeps and shows for the instance's
whole life: the agent fetches them over the agent API, under its attempt's token, and only until it reports
started."""

from __future__ import annotations

import json
import threading

from sqlalchemy import select
from world import agent_poster

from spotrun.server.agent_api import hand_out_job_part, ordinal
from spotrun.state import Event

SECRET = "sk-live-0123456789abcdef"
SPEC = f"""
name: secretive
run: "python train.py --epochs 3"
setup: "pip install -r requirements.txt"
workdir: /tmp
env: {{WANDB_API_KEY: {SECRET}, SEED: "7"}}
resources: {{cloud: local, instance_type: local.cpu}}
spot: {{zones: [m-a, m-b, m-c]}}
"""


def launched(world) -> tuple[int, dict]:
    job_id = world.submit(SPEC)
    world.tick()
    return job_id, world.cloud.user_data[world.attempts(job_id)[0].instance_id]


def fetch(world, user_data: dict, token: str | None = None):
    config = json.loads(user_data["env"]["SPOTRUN_AGENT_CONFIG"])
    return world.api.get(
        f"/agent/v1/attempts/{config['attempt_id']}/job",
        headers={"Authorization": f"Bearer {token or config['token']}"},
    )


def test_the_user_data_holds_no_command_and_no_env(world):
    _, user_data = launched(world)

    text = json.dumps(user_data)
    assert SECRET not in text and "train.py" not in text and "requirements.txt" not in text
    config = json.loads(user_data["env"]["SPOTRUN_AGENT_CONFIG"])
    assert not {"run", "setup", "workdir", "env"} & config.keys() and config["token"]


def test_the_attempts_token_fetches_the_job_part(world):
    _, user_data = launched(world)

    response = fetch(world, user_data)

    assert response.status_code == 200
    assert response.json() == {
        "run": "python train.py --epochs 3",
        "setup": "pip install -r requirements.txt",
        "workdir": "/tmp",
        "env": {"WANDB_API_KEY": SECRET, "SEED": "7"},
    }
    assert fetch(world, user_data).status_code == 200  # an answer lost on the way may be asked for again


def test_another_token_gets_nothing(world):
    _, user_data = launched(world)

    response = fetch(world, user_data, token="0" * 64)

    assert response.status_code == 403 and SECRET not in response.text


def test_once_the_agent_started_the_job_part_is_no_longer_handed_out(world):
    _, user_data = launched(world)
    agent_poster(world.api, user_data)("started", {"address": "127.0.0.1"})

    response = fetch(world, user_data)

    assert response.status_code == 410 and "started already" in response.text and SECRET not in response.text


def test_an_ended_attempts_token_gets_nothing(world):
    job_id, user_data = launched(world)
    world.cloud.reclaim(world.attempts(job_id)[0].instance_id)
    world.tick()
    assert world.attempts(job_id)[0].ended_at is not None

    response = fetch(world, user_data)

    assert response.status_code == 410 and "has ended" in response.text


def handouts(world, job_id: int) -> list:
    with world.store.session() as session:
        rows = session.scalars(
            select(Event).where(Event.job_id == job_id, Event.kind == "job_part_served").order_by(Event.id)
        ).all()
        return [(row.message, row.data) for row in rows]


def test_each_handout_is_an_event_naming_who_asked_and_a_second_one_says_so(world):
    job_id, user_data = launched(world)
    assert handouts(world, job_id) == []

    fetch(world, user_data)
    fetch(world, user_data)

    (first, first_data), (second, second_data) = handouts(world, job_id)
    assert first_data == {"client": "testclient", "handout": 1} and "handed to testclient" in first
    assert "time" not in first
    assert second_data == {"client": "testclient", "handout": 2}
    assert "2nd time (first to testclient)" in second and "anyone else holding the attempt's token" in second


def test_a_refused_fetch_records_no_handout(world):
    job_id, user_data = launched(world)

    fetch(world, user_data, token="0" * 64)
    agent_poster(world.api, user_data)("started", {"address": "127.0.0.1"})
    fetch(world, user_data)

    assert handouts(world, job_id) == []


def test_ordinals_read_as_english():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th",
    ]


def test_two_handouts_at_the_same_moment_are_counted_in_turn(world):
    """Both read the count before either wrote: both were "the first", and no event said "2nd time"."""
    job_id, _ = launched(world)
    attempt_id = world.attempts(job_id)[0].id
    first_inside, release, second_done = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with world.store.session() as session:
            hand_out_job_part(session, attempt_id, "10.0.0.1", world.clock.now())
            first_inside.set()
            release.wait(10)  # still inside its transaction

    def second() -> None:
        with world.store.session() as session:
            hand_out_job_part(session, attempt_id, "10.0.0.2", world.clock.now())
        second_done.set()

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert first_inside.wait(10)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    assert not second_done.wait(0.5)  # it waits for the first
    release.set()
    for thread in threads:
        thread.join(15)

    assert [data for _, data in handouts(world, job_id)] == [
        {"client": "10.0.0.1", "handout": 1}, {"client": "10.0.0.2", "handout": 2},
    ]
