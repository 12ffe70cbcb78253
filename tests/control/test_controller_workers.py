"""Several controller workers over one database: no job is ever driven by two, and a dead worker's jobs are
taken over once its claims expire."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from spotrun.control import jobs, records
from spotrun.control.clock import ManualClock, WallClock
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.spec import parse_spec
from spotrun.server.agent_api import WORKERS_KEPT_SECONDS, create_agent_app
from spotrun.state import Event, Job

from memory_cloud import ZONES, MemoryCloud
from world import agent_poster

SPEC = "run: 'true'\nresources: {cloud: local, instance_type: local.cpu}\nspot: {zones: [m-a, m-b, m-c]}\n"


class RecordingController(Controller):
    """Records when it drove which job, to check that two workers never overlap on one."""

    def __init__(self, *args, log, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = log

    def drive(self, job_id: int) -> None:
        started = time.monotonic()
        super().drive(job_id)
        self.log.append((job_id, self.worker_id, started, time.monotonic()))


def worker(store, cloud, name, log, claim_ttl):
    settings = ControllerSettings(controller_url="http://unused", boot_timeout=3600, claim_ttl=claim_ttl)
    return RecordingController(
        store, settings, clock=WallClock(), provider_factory=lambda _: cloud,
        prices=lambda *a, **k: (1.0, 3.0), worker_id=name, log=log,
    )


def workers_on(store, clock, cloud):
    """make(name): a controller worker of that name on `store`, `clock` and `cloud`, with 30 s claims."""
    settings = ControllerSettings(controller_url="http://unused", boot_timeout=3600, claim_ttl=30.0)
    return lambda name: Controller(
        store, settings, clock=clock, provider_factory=lambda _: cloud, prices=lambda *a, **k: (1.0, 3.0), worker_id=name,
    )


def run_ticks(controller, stop: threading.Event, errors: list) -> None:
    while not stop.is_set():
        try:
            controller.tick()
        except Exception as error:  # pragma: no cover - surfaced by the assertion below
            errors.append(error)
            return


def drives_by_job(log):
    by_job = defaultdict(list)
    for job_id, name, start, end in log:
        by_job[job_id].append((name, start, end))
    return by_job


def test_two_workers_never_drive_the_same_job_and_take_over_a_dead_ones_jobs(store, tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    cloud = MemoryCloud(WallClock())
    ids = [jobs.submit(store, parse_spec(SPEC), time.time(), local_zones=ZONES) for _ in range(40)]
    log: list = []
    errors: list = []
    first, second = worker(store, cloud, "w1", log, 1.0), worker(store, cloud, "w2", log, 1.0)
    stop_first, stop_second = threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=run_ticks, args=(first, stop_first, errors)),
        threading.Thread(target=run_ticks, args=(second, stop_second, errors)),
    ]
    threads[0].start()
    # w2 starts once w1 drives a job: started together on a loaded machine, w2 could claim all 40 before w1's
    # first claim and leave nothing to take over
    began = time.monotonic()
    while not any(entry[1] == "w1" for entry in log) and time.monotonic() - began < 30:
        time.sleep(0.01)
    threads[1].start()
    time.sleep(2)  # both workers tick for two claim lifetimes before w1 dies
    stop_first.set()  # w1 dies without releasing anything
    threads[0].join()
    w1_died = time.monotonic()
    # w2 runs on until it has driven every job of w1's a few times since w1 died (its claims expire 1 s after w1's
    # last renewal), rather than for a fixed 5 s: the assertions below say what must have happened by then
    while not _took_over(log, w1_died, drives=3) and not errors and time.monotonic() - w1_died < 30:
        time.sleep(0.05)
    stop_second.set()
    threads[1].join()
    assert errors == []

    by_job = drives_by_job(log)
    assert set(by_job) == set(ids), "every job was driven"
    for job_id, drives in by_job.items():
        drives.sort(key=lambda d: d[1])
        for (name_a, _, end_a), (name_b, start_b, _) in zip(drives, drives[1:]):
            if name_a != name_b:
                assert start_b >= end_a, f"job {job_id}: {name_b} drove it while {name_a} still was"
    w1_jobs = {job_id for job_id, drives in by_job.items() if any(d[0] == "w1" for d in drives)}
    assert w1_jobs, "the first worker claimed some jobs"
    taken_over = {job_id for job_id in w1_jobs if any(d[0] == "w2" and d[1] > w1_died for d in by_job[job_id])}
    assert taken_over == w1_jobs, "the second worker took over every job of the dead one"

    tokens = [i.client_token for i in cloud.instances.values()]
    assert len(tokens) == len(set(tokens)) == len(ids), "one instance per job, none launched twice"
    with store.session() as session:
        assert {j.claimed_by for j in session.query(Job)} == {"w2"}


def _took_over(log: list, w1_died: float, drives: int) -> bool:
    """Every job w1 drove has been driven by w2 at least `drives` times since w1 died."""
    entries = list(log)  # appended to by w2's thread meanwhile
    w1_jobs = {job_id for job_id, name, _, _ in entries if name == "w1"}
    since = defaultdict(int)
    for job_id, name, start, _ in entries:
        if name == "w2" and start > w1_died:
            since[job_id] += 1
    return bool(w1_jobs) and all(since[job_id] >= drives for job_id in w1_jobs)


class SlowCloud(MemoryCloud):
    """Every launch takes 20 s of the (manual) clock: a tick over a few jobs outlasts a 30 s claim."""

    def launch(self, request):
        self.clock.advance(20.0)
        return super().launch(request)


def test_a_long_tick_renews_its_claims_and_drives_every_job(store, tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    clock = ManualClock()
    cloud = SlowCloud(clock)
    for _ in range(5):
        jobs.submit(store, parse_spec(SPEC), clock.now(), local_zones=ZONES, prices=lambda *a, **k: (1.0, 3.0))
    settings = ControllerSettings(controller_url="http://unused", boot_timeout=3600, claim_ttl=30.0)
    controller = Controller(
        store, settings, clock=clock, provider_factory=lambda _: cloud, prices=lambda *a, **k: (1.0, 3.0), worker_id="w1"
    )
    controller.tick()  # 5 launches: 100 s of clock in one tick
    assert len(cloud.instances) == 5, "jobs after the first 30 s of the tick were skipped: their claims had expired"
    with store.session() as session:
        assert {job.claimed_by for job in session.query(Job)} == {"w1"}


def test_a_drive_that_outlasts_its_claim_keeps_it_and_no_other_worker_takes_the_job_meanwhile(
    store, tmp_path, monkeypatch
):
    """A launch that takes three claim lives (a slow cloud call): renewing only between drives let the claim lapse
    half-way and the other worker drove the job too."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    cloud = MemoryCloud(WallClock())
    launching, launch = threading.Event(), cloud.launch

    def slow_launch(request):
        launching.set()
        time.sleep(1.5)
        return launch(request)

    monkeypatch.setattr(cloud, "launch", slow_launch)
    job_id = jobs.submit(store, parse_spec(SPEC), time.time(), local_zones=ZONES)
    log: list = []
    first, second = worker(store, cloud, "w1", log, 0.5), worker(store, cloud, "w2", log, 0.5)
    ticked = threading.Event()
    thread = threading.Thread(target=lambda: (first.tick(), ticked.set()))
    thread.start()
    assert launching.wait(30), "the first worker never launched"
    while not ticked.is_set():
        second.tick()
        time.sleep(0.05)
    thread.join()
    assert [name for driven, name, *_ in log if driven == job_id] == ["w1"], "the second worker drove it too"
    assert len(cloud.instances) == 1


def stalled_while_another_places(store, monkeypatch, spec: str, then=None):
    """w1 ticks and stalls in a cloud call (the zones) past its claim; meanwhile w2 takes the job and places it, and
    `then(clock)` runs (the stale answer w1's policy will give). (clock, cloud, job id) once w1's tick is over."""
    clock = ManualClock()
    cloud = MemoryCloud(clock)
    make = workers_on(store, clock, cloud)
    stalled, other = make("w1"), make("w2")
    job_id = jobs.submit(store, parse_spec(spec), clock.now(), local_zones=ZONES)
    real_zones, stalls = cloud.zones, []

    def zones_while_the_other_takes_over(instance_type, accelerators=None):
        if not stalls:
            stalls.append(True)
            clock.advance(60)  # past w1's claim
            other.tick()  # w2 claims the job and places it
            if then is not None:
                then(clock)
        return real_zones(instance_type, accelerators)

    monkeypatch.setattr(cloud, "zones", zones_while_the_other_takes_over)
    stalled.tick()
    return clock, cloud, job_id


def test_a_worker_that_stalled_past_its_claim_does_not_place_the_job_again(store, tmp_path, monkeypatch):
    """w1 passes its claim check, then stalls in a cloud call (here: `zones`) past its claim; w2 takes the job and
    places it. Resumed, w1 went on to place it too: two instances ran the job. Its launch intent is now fenced."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    _, cloud, job_id = stalled_while_another_places(store, monkeypatch, SPEC)
    with store.session() as session:
        job = session.get(Job, job_id)
        assert job.claimed_by == "w2"
        assert [attempt.number for attempt in job.attempts] == [1]
    assert len(cloud.instances) == 1


def stalling_and_other_worker(store, tmp_path, monkeypatch, max_restarts: int):
    """Two workers on one job (submitted, then placed by the first): (clock, cloud, stalled, other, job_id, agent)."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    clock = ManualClock()
    cloud = MemoryCloud(clock)
    make = workers_on(store, clock, cloud)
    stalled, other = make("w1"), make("w2")
    job_id = jobs.submit(store, parse_spec(SPEC + f"max_restarts_on_error: {max_restarts}\n"), clock.now(),
                         local_zones=ZONES)
    stalled.tick()
    [first] = cloud.instances
    agent = agent_poster(TestClient(create_agent_app(store, clock)), cloud.user_data[first])
    return clock, cloud, stalled, other, job_id, agent


def test_a_worker_that_stalled_ending_an_attempt_writes_nothing_once_another_took_the_job_over(store, tmp_path,
                                                                                                monkeypatch):
    """w1 stalls in the cloud's terminate past its claim; w2 ends the attempt and places the job again. Resumed, w1
    wrote the same end a second time: the failure counted twice (the job FAILED) and a bogus event was logged."""
    clock, cloud, stalled, other, job_id, agent = stalling_and_other_worker(store, tmp_path, monkeypatch, 1)
    agent("started", {"address": "127.0.0.1"})
    stalled.tick()
    agent("exit", {"outcome": "failed", "exit_code": 1})
    real_terminate, stalls = cloud.terminate, []

    def terminate_while_the_other_takes_over(instance_id):
        if not stalls:
            stalls.append(True)
            clock.advance(60)  # past w1's claim
            other.tick()  # w2 ends the attempt
            other.tick()  # and places the job again
        return real_terminate(instance_id)

    monkeypatch.setattr(cloud, "terminate", terminate_while_the_other_takes_over)
    stalled.tick()
    with store.session() as session:
        job = session.get(Job, job_id)
        assert job.claimed_by == "w2" and job.restarts_on_error == 1 and job.state != "FAILED"
        assert [(a.number, a.ended_at is None) for a in job.attempts] == [(1, False), (2, True)]
        ends = session.scalars(select(Event).where(Event.job_id == job_id, Event.kind == "attempt_ended")).all()
        assert len(ends) == 1


def test_on_sqlite_too_a_fenced_launch_keeps_the_claim_until_it_commits(store, tmp_path, monkeypatch):
    """The fence is a row lock on PostgreSQL; on SQLite it was a bare SELECT, so w2 took the claim while w1, past
    its fence, was still writing its launch intent: both launched the job."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    clock = ManualClock()
    cloud = MemoryCloud(clock)
    make = workers_on(store, clock, cloud)
    fenced, other_started = threading.Event(), threading.Event()
    real_number = records.next_attempt_number

    def number_after_a_stall(session, job_id):
        if threading.current_thread().name == "w1":
            fenced.set()
            other_started.wait(10)
            time.sleep(0.5)  # w2 tries to claim meanwhile
        return real_number(session, job_id)

    monkeypatch.setattr(records, "next_attempt_number", number_after_a_stall)
    job_id = jobs.submit(store, parse_spec(SPEC), clock.now(), local_zones=ZONES)
    first = threading.Thread(target=make("w1").tick, name="w1")
    first.start()
    assert fenced.wait(30)
    clock.advance(60)  # past w1's claim
    second = threading.Thread(target=make("w2").tick, name="w2")
    second.start()
    other_started.set()
    first.join(30)
    second.join(60)
    with store.session() as session:
        assert [attempt.number for attempt in session.get(Job, job_id).attempts] == [1]
    assert len(cloud.instances) == 1


@pytest.mark.parametrize("answer", ["wait", "give up"])
def test_a_worker_that_stalled_past_its_claim_does_not_wait_or_fail_a_job_another_placed(
    store, tmp_path, monkeypatch, scripted, answer
):
    """w1 stalls in the cloud's zones while w2 takes the job and places it; resumed, w1's Wait (or GiveUp) was
    written over w2's placement: a job WAITING with an attempt running (stuck: it could never move to RUNNING), or
    FAILED with its instance running on."""
    from spotrun.policy import GiveUp, Wait

    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))

    def stale_answer(clock) -> None:
        scripted.placement = Wait(clock.now() + 600, "no spot") if answer == "wait" else GiveUp("no zone")

    spec = SPEC.replace("zones: [m-a, m-b, m-c]", "zones: [m-a], policy: scripted")
    _, _, job_id = stalled_while_another_places(store, monkeypatch, spec, then=stale_answer)
    with store.session() as session:
        job = session.get(Job, job_id)
        assert job.claimed_by == "w2" and job.state == "PROVISIONING" and job.failure_reason is None
        assert [attempt.number for attempt in job.attempts] == [1]


def test_a_worker_stalled_in_describe_does_not_mark_running_a_job_another_restarted(store, tmp_path, monkeypatch):
    """w1 judges attempt 1 'agent started' and stalls in the cloud's describe past its claim; w2 takes the job over,
    ends attempt 1 (the command failed) and places attempt 2. Resumed, w1 marks the job RUNNING, unfenced."""
    clock, cloud, stalled, other, job_id, agent = stalling_and_other_worker(store, tmp_path, monkeypatch, 3)
    agent("started", {"address": "127.0.0.1"})
    real_describe, stalls = cloud.describe, []

    def describe_while_the_other_takes_over(instance_id):
        answer = real_describe(instance_id)
        if not stalls:
            stalls.append(True)
            clock.advance(60)  # past w1's claim
            agent("exit", {"outcome": "failed", "exit_code": 1})
            other.tick()  # w2 ends attempt 1: PROVISIONING, restart 1
            other.tick()  # and places attempt 2
        return answer

    monkeypatch.setattr(cloud, "describe", describe_while_the_other_takes_over)
    stalled.tick()
    with store.session() as session:
        job = session.get(Job, job_id)
        assert job.claimed_by == "w2"
        assert job.state == "PROVISIONING", "w1 wrote RUNNING over w2's restart while attempt 2's agent never started"


def test_no_lock_is_held_while_the_price_function_asks_the_cloud(store, tmp_path, monkeypatch):
    """The price function may ask the cloud (EC2's spot price history, Azure's and GCP's price lists): a launch
    intent is quoted before its fence for that reason. Recording the instance of a spot launch wakes jobs waiting
    for spot and prices them there, inside the fenced transaction: every writer waits meanwhile (SQLite), or
    every writer of the job's and attempt's rows (PostgreSQL: the agent's heartbeats)."""
    import sqlite3

    import psycopg
    from sqlalchemy import update

    from spotrun.control.controller import Controller, ControllerSettings

    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    clock = ManualClock()
    cloud = MemoryCloud(clock)
    probes: list[str] = []
    placed: list[int] = []

    def probe_writers() -> str:
        url = store.engine.url
        if url.get_backend_name() == "sqlite":
            probe = sqlite3.connect(url.database, timeout=0.2)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.rollback()
                return "free"
            except sqlite3.OperationalError as error:
                return f"sqlite: {error}"
            finally:
                probe.close()
        with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={url.database}", autocommit=True) as probe:
            probe.execute("SET lock_timeout = '200ms'")
            try:  # what the agent API's heartbeat writes
                probe.execute("UPDATE attempts SET last_heartbeat_at = 1 WHERE job_id = %s", (placed[0],))
                return "free"
            except psycopg.errors.LockNotAvailable as error:
                return f"postgresql: {str(error).strip()}"

    def prices(cloud_name, instance_type, market, zone, accelerators=None):
        if placed and market == "spot" and zone is not None:
            probes.append(probe_writers())  # a cloud call would take this long, and longer
        return (1.0 if market == "spot" else 3.0), 3.0

    settings = ControllerSettings(controller_url="http://unused", boot_timeout=3600, claim_ttl=30.0)
    controller = Controller(store, settings, clock=clock, provider_factory=lambda _: cloud, prices=prices,
                            worker_id="w1")
    waiting = jobs.submit(store, parse_spec(SPEC), clock.now(), local_zones=ZONES, prices=prices)
    with store.session() as session:
        session.execute(update(Job).where(Job.id == waiting).values(
            state="WAITING", waits_for_spot=True, not_before=clock.now() + 3600))
    running = jobs.submit(store, parse_spec(SPEC), clock.now(), local_zones=ZONES, prices=prices)
    placed.append(running)
    controller.tick()
    with store.session() as session:
        assert [a.instance_id is not None for a in session.get(Job, running).attempts] == [True]
    assert probes and all(p == "free" for p in probes), probes


class SkewedWallClock(WallClock):
    """This machine's wall clock, `offset` seconds off."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset


def test_workers_whose_clocks_disagree_keep_their_claims_on_postgresql(store, tmp_path, monkeypatch):
    """Claims expired by the writer's clock and were judged by the reader's: a worker whose clock ran 45 s ahead
    took every claim of one behind as soon as it was written (claims live 30 s). On PostgreSQL both write and
    judge claims by the database's clock; SQLite lives on one machine, whose clock its writers share."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's writers share one machine's clock")
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    cloud = MemoryCloud(ManualClock())
    settings = ControllerSettings(controller_url="http://unused", claim_ttl=30.0)

    def worker(name: str, offset: float) -> Controller:
        return Controller(store, settings, clock=SkewedWallClock(offset), provider_factory=lambda _: cloud,
                          worker_id=name)

    behind, ahead = worker("w-behind", -45.0), worker("w-ahead", 45.0)
    job_id = jobs.submit(store, parse_spec(SPEC), time.time(), local_zones=ZONES)
    assert behind._live_job_ids() == [job_id]
    assert ahead._live_job_ids() == []
    with store.session() as session:
        assert session.get(Job, job_id).claimed_by == "w-behind"


def test_a_worker_announces_its_agents_api_and_its_instances_learn_the_others(store, tmp_path, monkeypatch):
    """Where an agent whose worker is gone goes on reporting (`state.workers`): its boot configuration names the
    other live workers, every heartbeat's answer the live ones, and a worker that stops is named no more."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    clock = ManualClock(1000.0)
    cloud = MemoryCloud(clock)
    settings = ControllerSettings(controller_url="http://unused", boot_timeout=3600, claim_ttl=30.0)

    def at(url: str, name: str) -> Controller:
        return Controller(store, replace(settings, controller_url=url), clock=clock, provider_factory=lambda _: cloud,
                          prices=lambda *a, **k: (1.0, 3.0), worker_id=name)

    first, second = at("http://first:1", "w1"), at("http://second:2", "w2")
    second.tick()  # announced, no job yet
    jobs.submit(store, parse_spec(SPEC), clock.now(), local_zones=ZONES)
    clock.advance(1.0)
    first.tick()  # claims the job and launches its instance
    [user_data] = cloud.user_data.values()
    config = json.loads(user_data["env"]["SPOTRUN_AGENT_CONFIG"])
    assert (config["controller_url"], config["controller_urls"]) == ("http://first:1", ["http://second:2"])

    post = agent_poster(TestClient(create_agent_app(store, clock=clock)), user_data)
    post("started", {})
    assert post("heartbeat")["controllers"] == ["http://first:1", "http://second:2"]  # the newest announcement first
    first.release_claims()  # stopped
    clock.advance(WORKERS_KEPT_SECONDS)
    assert post("heartbeat")["controllers"] == ["http://second:2"]
    clock.advance(30.0)  # the second's announcement expires unless renewed
    assert post("heartbeat")["controllers"] == []
