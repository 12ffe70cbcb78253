"""The job's run, setup, workdir and env stay out of the user data the cloud keeps and shows for the instance's
whole life: the agent fetches them over the agent API, under its attempt's token, and only until it reports
started."""

from __future__ import annotations

import json

from world import agent_poster

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
