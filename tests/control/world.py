"""A controller, an in-memory cloud and the real agent API on a manual clock, for the controller's tests."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from memory_cloud import ZONES, MemoryCloud
from spotrun.control import jobs
from spotrun.control.clock import ManualClock
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.server.agent_api import create_agent_app
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Job, Store

SPEC = """
name: unit
run: "true"
resources: {cloud: local, instance_type: local.cpu}  # placed in the in-memory cloud below
spot: {zones: [m-a, m-b, m-c], preemptions_before_fallback: 3, max_wait: 2h}
max_restarts_on_error: 1
"""


def prices(cloud, instance_type, market, zone, accelerators=None):
    return (1.0 if market == "spot" else 3.0), 3.0


class World:
    def __init__(self, store: Store, tmp_path) -> None:
        self.store = store
        self.clock = ManualClock()
        self.cloud = MemoryCloud(self.clock)
        self.api = TestClient(create_agent_app(store, self.clock))
        self.controller = self.new_controller()

    def new_controller(self, worker_id: str | None = None, **overrides) -> Controller:
        """A controller on this world's store, clock and cloud; `overrides`: ControllerSettings fields; `worker_id`:
        one of several workers, as every daemon is (it drives the jobs it claims)."""
        fields = {"heartbeat_timeout": 30, "boot_timeout": 60, "backoff_base": 5, **overrides}
        settings = ControllerSettings(controller_url="http://unused", **fields)
        return Controller(self.store, settings, clock=self.clock, provider_factory=lambda name: self.cloud, prices=prices,
                          worker_id=worker_id)

    def submit(self, text: str = SPEC) -> int:
        return jobs.submit(self.store, parse_spec(text), self.clock.now(), local_zones=ZONES)

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.controller.tick()

    def job(self, job_id: int) -> Job:
        with self.store.session() as session:
            job = session.get(Job, job_id)
            _ = job.attempts, job.placed_attempts  # read after the session ends
            return job

    def attempts(self, job_id: int) -> list[Attempt]:
        return self.job(job_id).attempts

    def agent(self, instance_id: str):
        return agent_poster(self.api, self.cloud.user_data[instance_id])

    def spot_lost_after(self, job_id: int, seconds: float) -> str:
        """Run the job's first attempt, let the cloud take it back `seconds` later; the zone it ran in."""
        lost = self.run_to_running(job_id)
        self.clock.advance(seconds)
        self.cloud.reclaim(lost)
        self.tick()
        [attempt, *_] = self.attempts(job_id)
        assert attempt.end_reason == "preempted"
        return attempt.zone

    def run_to_running(self, job_id: int) -> str:
        self.tick()
        instance = self.attempts(job_id)[-1].instance_id
        self.agent(instance)("started", {"address": "127.0.0.1"})
        self.tick()
        assert self.job(job_id).state == "RUNNING"
        return instance


def agent_poster(api: TestClient, user_data: dict):
    """What the agent of the instance launched with `user_data` posts to the agent API: post(path, body) -> reply."""
    config = json.loads(user_data["env"]["SPOTRUN_AGENT_CONFIG"])
    headers = {"Authorization": f"Bearer {config['token']}"}
    base = f"/agent/v1/attempts/{config['attempt_id']}"

    def post(path: str, body: dict | None = None):
        response = api.post(f"{base}/{path}", json=body or {}, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()

    return post


class ScriptedPolicy:
    """A running-job policy whose answers the test sets (the real policies' rules are tested in tests/policy)."""

    name = "scripted"
    answer = None  # what a running job is told
    placement = None  # where a job is placed (None: spot in the first zone)
    asked = 0
    last_context = None
    placed_context = None

    def __init__(self, **_):
        pass

    def place(self, ctx):
        from spotrun.policy import Launch

        ScriptedPolicy.placed_context = ctx
        return ScriptedPolicy.placement or Launch(ctx.zones[0], "spot", "scripted")

    def decide(self, ctx):
        ScriptedPolicy.asked += 1
        ScriptedPolicy.last_context = ctx
        assert ctx.current is not None and ctx.deadline is not None
        assert not ctx.moves_drain_first  # a move launches first: a refused try keeps the instance held
        return ScriptedPolicy.answer


DEADLINE_SPEC = SPEC.replace("max_wait: 2h", "max_wait: 2h, deadline: 10h, policy: scripted") + "estimated_duration: 5h\n"


def alive_for(world, instance, seconds):
    """Let `seconds` pass in ticks of 20 s, the agent heartbeating, as a healthy attempt would."""
    for _ in range(int(seconds // 20)):
        world.agent(instance)("heartbeat", {})
        world.tick(20)
    world.agent(instance)("heartbeat", {})
    world.tick(seconds % 20)
