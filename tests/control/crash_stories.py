"""Job lifecycles driven end to end with the controller killed at chosen points (`crash_points`), each time restarted
fresh on the same store and cloud, and the invariants the design promises checked once the job is over.

The world outside the controller goes on whatever the controller does: the agents on the instances report in,
heartbeat, train, take a cloud's notice, stop when asked; the cloud takes back what it noticed. They act on what
they are told (the agent API's answers) and on their instance's life, never on the controller's plans, so that a
crash that changes what the controller does is seen in what happens.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from fastapi.testclient import TestClient
from sqlalchemy import select

from crash_points import CLOUD_EFFECTS, CountingCloud, CountingStore, CrashPoints
from gang_world import GANG
from memory_cloud import ZONES, Crash, MemoryCloud
from spotrun.control import jobs
from spotrun.control.clock import ManualClock
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.control.states import TERMINAL, JobState, can_transition
from spotrun.costs.billing import CLOUD_RULES
from spotrun.policy import Keep, Launch
from spotrun.server.agent_api import create_agent_app
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Event, Instance, Job, Store
from world import SPEC, prices

STEP = 20.0  # seconds between ticks; the agents heartbeat at each (the heartbeat timeout is 30 s)
WORK = 60.0  # seconds an agent trains before its command ends (or, on the first instance, before its story's event)
MAX_STEPS = 60  # the stories end in ~15 steps without a crash; a restart's first tick sweeps orphans at once
RECLAIM_AFTER_NOTICE = 60.0  # the cloud takes a noticed instance back this long after its notice
NOTICE_LEAD = 90.0  # the notice's stated reclaim time, after it

AWS_BILLING = {"local": CLOUD_RULES["aws"]}  # EC2's free first hour: a noticed instance is left to the cloud
MOVE_SPEC = SPEC.replace("max_wait: 2h", "max_wait: 2h, deadline: 10h, policy: crash_move") + "estimated_duration: 5h\n"
GANG_SPEC = GANG.replace("nodes: 3", "nodes: 2").replace("gang_timeout: 30s", "gang_timeout: 60s")


class MovePolicy:
    """Places the job on spot in the first zone; running there, wants it on spot in m-b (a make-before-break move)."""

    name = "crash_move"

    def __init__(self, **_) -> None:
        pass

    def place(self, ctx):
        return Launch(ctx.zones[0], "spot", "first zone")

    def decide(self, ctx):
        if ctx.current.zone == "m-b":
            return Keep("in m-b")
        return Launch("m-b", "spot", "m-b is cheaper")


@dataclass(frozen=True)
class Story:
    key: str  # its test's id
    name: str
    spec: str
    # what befalls the first instance whose command runs: "notice" (then taken back), "notice_not_kept", "taken" (no
    # notice), "asked_to_move" (by the job's policy), "fails" (its command), "silent" (its agent hangs); a gang's
    # first generation loses its node 1 (taken, no notice)
    first_runner: str
    settings: dict = field(default_factory=dict)


SINGLE_RECLAIMED = Story("reclaimed", "single node, spot reclaimed with notice", SPEC, "notice",
                         {"billing_rules": AWS_BILLING})
SINGLE_MOVED = Story("moved", "single node, make-before-break move", MOVE_SPEC, "asked_to_move")
SINGLE_TAKEN = Story("taken", "single node, spot taken back without notice", SPEC, "taken")
SINGLE_NOTICE_NOT_KEPT = Story("notice_not_kept", "single node, a notice the cloud does not keep", SPEC,
                               "notice_not_kept", {"billing_rules": AWS_BILLING})
SINGLE_FAILED = Story("failed", "single node, the command fails once", SPEC, "fails")
SINGLE_SILENT = Story("silent", "single node, the agent hangs", SPEC, "silent")
GANG_NODE_TAKEN = Story("gang_node_taken", "2-node gang, one node taken", GANG_SPEC, "taken")
STORIES = (SINGLE_RECLAIMED, SINGLE_MOVED, SINGLE_TAKEN, SINGLE_NOTICE_NOT_KEPT, SINGLE_FAILED, SINGLE_SILENT,
           GANG_NODE_TAKEN)


class Bench:
    """One test's store, clock and agent API, used run after run: `renew` empties the database (`empty_database`,
    which finds every connection closed) before each. A new agent app, event loop and store per run cost more than
    the run itself."""

    def __init__(self, store: Store, empty_database: Callable[[], None]) -> None:
        self.store = store
        self.clock = ManualClock()
        self._empty_database = empty_database
        self.api = TestClient(create_agent_app(store, self.clock))

    def __enter__(self) -> Bench:
        self.api.__enter__()  # entered: one event loop for all its requests, not one each
        return self

    def __exit__(self, *exc) -> None:
        self.api.__exit__(*exc)
        self.store.dispose()

    def renew(self) -> None:
        self.store.dispose()
        self._empty_database()


@dataclass
class Run:
    """One story's run: its cloud, the points its controller passed, and when and where it was killed (`trace`)."""

    bench: Bench
    story: Story
    cloud: MemoryCloud
    points: CrashPoints
    job_id: int = 0
    trace: list[str] = field(default_factory=list)

    @property
    def store(self) -> Store:
        return self.bench.store

    @property
    def clock(self) -> ManualClock:
        return self.bench.clock


def run_story(bench: Bench, story: Story, crash_at: Collection[int] = (),
              counted_calls: tuple[str, ...] = CLOUD_EFFECTS) -> Run:
    """Submit the story's job on an empty database and drive it to its end, the controller killed at each point of
    `crash_at` (none: `run.points` only counts them) and restarted at the next step."""
    bench.renew()
    run = Run(bench, story, MemoryCloud(bench.clock), CrashPoints(crash_at))
    counting_store = CountingStore(bench.store, run.points)
    counting_cloud = CountingCloud(run.cloud, run.points, counted_calls)

    def fresh_controller() -> Controller:
        fields = {"heartbeat_timeout": 30, "boot_timeout": 60, "backoff_base": 5, **story.settings}  # as World's
        settings = ControllerSettings(controller_url="http://unused", **fields)
        return Controller(counting_store, settings, clock=bench.clock, provider_factory=lambda name: counting_cloud,
                          prices=prices)

    controller = fresh_controller()
    submitted_at = bench.clock.now()
    run.job_id = jobs.submit(bench.store, parse_spec(story.spec), submitted_at, local_zones=ZONES)
    outside = Outside(run)
    for _ in range(MAX_STEPS):
        bench.clock.advance(STEP)
        outside.act()
        try:
            controller.tick()
        except Crash as crash:
            run.trace.append(f"t+{bench.clock.now() - submitted_at:.0f} s: crashed at {crash}")
            controller = fresh_controller()  # a new process, on the same store and cloud
        if over(run):
            break
    return run


def over(run: Run) -> bool:
    """The job ended, every attempt with it, and nothing of it is left running or waiting in the cloud."""
    with run.store.session() as session:
        job = session.get(Job, run.job_id)
        open_attempts = [a for a in job.attempts if a.ended_at is None]
        awaiting = session.scalars(select(Instance.id).where(Instance.state == "awaiting_reclaim")).all()
    return JobState(job.state) in TERMINAL and not open_attempts and not awaiting and not run.cloud.running()


class Outside:
    """The agents on the story's instances and the cloud's reclaims, one step at a time."""

    def __init__(self, run: Run) -> None:
        self.cloud = run.cloud
        self.clock = run.clock
        self.api = run.bench.api
        self.story = run.story
        self.agents: dict[str, Agent] = {}
        self.reclaims: dict[str, float] = {}  # instance id -> when the cloud takes it
        self.first_runner: str | None = None

    def act(self) -> None:
        now = self.clock.now()
        for instance_id, at in list(self.reclaims.items()):
            if now >= at:
                del self.reclaims[instance_id]
                if self.cloud.instances[instance_id].state == "running":
                    self.cloud.reclaim(instance_id)
        for instance_id in list(self.cloud.instances):
            agent = self.agents.setdefault(instance_id, Agent(self, instance_id))
            agent.act(now)

    def runs_first(self, instance_id: str) -> bool:
        """Whether this instance's command, starting now, is the first of the job to run."""
        self.first_runner = self.first_runner or instance_id
        return self.first_runner == instance_id


class Agent:
    """The agent on one instance: reports in, heartbeats, trains unless held, and ends as its story says."""

    def __init__(self, outside: Outside, instance_id: str) -> None:
        self.outside = outside
        self.instance_id = instance_id
        config = json.loads(outside.cloud.user_data[instance_id]["env"]["SPOTRUN_AGENT_CONFIG"])
        self.gang = config["gang"]
        self.base = f"/agent/v1/attempts/{config['attempt_id']}"
        self.headers = {"Authorization": f"Bearer {config['token']}"}
        self.started = self.done = False
        self.training_since: float | None = None  # when its command (or its gang's generation) started
        self.runs_first = False  # its command was the job's first to run: the story's event befalls it
        self.generation: int | None = None
        self.generation_exited = False

    def post(self, path: str, body: dict | None = None) -> dict | None:
        """The answer; None where the API refuses (an attempt that has ended: the agent gives up)."""
        response = self.outside.api.post(f"{self.base}/{path}", json=body or {}, headers=self.headers)
        if response.status_code == 410:
            return None
        assert response.status_code == 200, response.text
        return response.json()

    def act(self, now: float) -> None:
        if self.done or self.outside.cloud.instances[self.instance_id].state != "running":
            return
        if not self.started:
            rank = self.gang["node_rank"] if self.gang else 0
            address = f"10.0.0.{self.instance_id.removeprefix('mi-')}"
            self.started = self.post("started", {"address": address, "port": 29500 + rank}) is not None
            self.done = not self.started
            return
        answer = self.post("heartbeat", {})
        if answer is None or answer["stop"]:  # ended, or asked to checkpoint and stop
            self.post("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
            self.done = True
        elif self.gang:
            self.train_in_generation(answer.get("gang"), now)
        elif not answer["hold"]:
            self.train(now)

    def train(self, now: float) -> None:
        if self.training_since is None:
            self.training_since, self.runs_first = now, self.outside.runs_first(self.instance_id)
        if now - self.training_since < WORK:
            return
        event = self.outside.story.first_runner if self.runs_first else "succeeds"
        if event == "asked_to_move":
            return  # it trains on until the controller asks it to stop
        self.done = True
        if event == "succeeds":
            self.post("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
        elif event == "fails":
            self.post("exit", {"outcome": "failed", "exit_code": 1, "checkpoint_synced": True})
        elif event in ("notice", "notice_not_kept"):  # the cloud's notice; it takes the instance back, or not
            self.post("notice", {"source": "aws-imds", "deadline": now + NOTICE_LEAD})
            self.post("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
            if event == "notice":
                self.outside.reclaims[self.instance_id] = now + RECLAIM_AFTER_NOTICE
        elif event == "taken":  # with no notice
            self.outside.cloud.reclaim(self.instance_id)
        else:
            assert event == "silent"  # the agent hangs: no word from it again, its instance runs on

    def train_in_generation(self, order: dict | None, now: float) -> None:
        if order is None or order["state"] == "ended":
            return
        if order["generation"] != self.generation:
            self.generation, self.generation_exited, self.training_since = order["generation"], False, now
        if self.generation_exited:
            return
        if order["state"] == "stopping":
            self.generation_exited = self.generation_exit(75)  # saved and stopped with the others
        elif now - self.training_since >= WORK:
            if self.generation > 1:
                self.generation_exited = self.generation_exit(0)
            elif self.gang["node_rank"] == 1:  # the story's event: the first generation's node 1 is taken, no notice
                self.outside.cloud.reclaim(self.instance_id)
                self.done = True

    def generation_exit(self, code: int) -> bool:
        """Report this node's command of the current generation exited with `code`; whether the API took it."""
        return self.post("generation_exit", {"generation": self.generation, "exit_code": code}) is not None


# ---- the invariants ------------------------------------------------------------------------------------------


def broken_invariants(run: Run, instances_without_crash: int | None = None) -> list[str]:
    """What the design's promises say of the run once it is over, broken; empty when every one holds."""
    cloud, job_id = run.cloud, run.job_id
    with run.store.session() as session:
        job = session.get(Job, job_id)
        attempts = list(session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)))
        instances = {i.id: i for i in session.scalars(select(Instance))}
        events = list(session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id)))
        session.expunge_all()
    broken: list[str] = []
    if job.state != JobState.SUCCEEDED:
        broken.append(f"the job ended {job.state}, not SUCCEEDED ({job.failure_reason})")
    broken += _launches_broken(cloud, attempts, instances_without_crash)
    broken += [f"instance {i.instance_id} ({i.client_token}) is left running" for i in cloud.running()]
    broken += [f"attempt {a.number} is not ended (state {a.state})" for a in attempts
               if a.ended_at is None or a.state != "ended"]
    broken += _bills_broken(cloud, run.clock.now(), attempts, instances, events)
    broken += _events_broken(events)
    return broken


def _launches_broken(cloud: MemoryCloud, attempts: list[Attempt], instances_without_crash: int | None) -> list[str]:
    """Every instance is an attempt's, launched by its token (a token sent again asks for the same instance), and
    no more were launched than without the crash."""
    broken = []
    asked: dict[str, tuple] = {}
    for request in cloud.requests:
        placement = (request.market, request.zone, request.instance_type)
        first = asked.setdefault(request.client_token, placement)
        if first != placement:
            broken.append(f"client token {request.client_token} launched {placement} after {first}")
    tokens = {a.client_token: a for a in attempts}
    for info in cloud.instances.values():
        attempt = tokens.get(info.client_token)
        if attempt is None:
            broken.append(f"instance {info.instance_id} was launched for no attempt on record ({info.client_token})")
        elif attempt.instance_id != info.instance_id:
            broken.append(f"attempt {attempt.number} records instance {attempt.instance_id}, its token launched "
                          f"{info.instance_id}")
    if instances_without_crash is not None and len(cloud.instances) > instances_without_crash:
        broken.append(f"{len(cloud.instances)} instances launched, {instances_without_crash} without the crash")
    return broken


def _bills_broken(
    cloud: MemoryCloud, now: float, attempts: list[Attempt], instances: dict[str, Instance], events: list[Event],
) -> list[str]:
    """Each attempt ended once and settled at most once, and billed exactly its instance's life in the cloud (none
    without an instance), which is on record as terminated, its own."""
    broken = []
    ends = Counter(e.attempt_id for e in events if e.kind == "attempt_ended")
    settled = Counter(e.attempt_id for e in events if e.kind in ("instance_settled", "orphan_billed"))
    for attempt in attempts:
        if ends[attempt.id] != 1 or settled[attempt.id] > 1:
            broken.append(f"attempt {attempt.number} ended {ends[attempt.id]} times, settled {settled[attempt.id]}")
        if attempt.billed_seconds is None or attempt.billed_seconds < 0:
            broken.append(f"attempt {attempt.number} billed {attempt.billed_seconds} s")
        info = cloud.instances.get(attempt.instance_id) if attempt.instance_id else None
        if info is None:
            if attempt.billed_seconds:
                broken.append(f"attempt {attempt.number}, with no instance, billed {attempt.billed_seconds} s")
            continue
        lived = (info.terminated_at or now) - info.launched_at
        if attempt.billed_seconds is not None and abs(attempt.billed_seconds - lived) > 1e-6:
            broken.append(f"attempt {attempt.number} billed {attempt.billed_seconds:.0f} s, its instance "
                          f"{info.instance_id} lived {lived:.0f} s")
        row = instances.get(info.instance_id)
        if row is None or row.attempt_id != attempt.id or row.state != "terminated":
            broken.append(f"instance {info.instance_id} is on record as "
                          f"{(row.attempt_id, row.state) if row else None}, not terminated for attempt {attempt.id}")
    return broken


def _events_broken(events: list[Event]) -> list[str]:
    """No tick failed on the job; it moved from state to state as the state machine allows, in time order."""
    broken = [f"stuck: {e.message}" for e in events if e.kind == "stuck"]
    state = JobState.PENDING.value
    previous_at = None
    for e in (e for e in events if e.kind == "state" and e.data is not None):  # (not the submission's)
        moved_from, moved_to = e.data["from"], e.data["to"]
        if moved_from != state or not can_transition(moved_from, moved_to):
            broken.append(f"event {e.id}: {moved_from} → {moved_to}, the job being {state}")
        if previous_at is not None and e.at < previous_at:
            broken.append(f"event {e.id}: at {e.at}, before the move before it ({previous_at})")
        state, previous_at = moved_to, e.at
    return broken
