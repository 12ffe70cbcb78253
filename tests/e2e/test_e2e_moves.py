"""End to end on one machine: running jobs moved by their policy, with the real controller daemon (in this process,
so that a scripted policy can be registered), local cloud and agents: a single node make-before-break (the digits
trainer), and a two-node DDP gang from on-demand to spot in another zone, through a standby gang."""

from __future__ import annotations

import re
import threading
import time

import pytest

from harness import ddp_job, digits_job, final_ddp_result, final_result, reference_ddp, reference_digits
from spotrun import policy
from spotrun.control import jobs
from spotrun.control.logs import read_log
from spotrun.control.states import is_terminal
from spotrun.policy import Keep, Launch
from spotrun.providers.local import LocalProvider
from spotrun.server.daemon import Daemon
from spotrun.spec import load_spec
from spotrun.state import Attempt, Event, Generation, Job, Store

pytestmark = pytest.mark.xdist_group("e2e")  # with `make test`'s workers: one e2e test at a time


class OnDemandThenSpotElsewhere:
    """Starts on on-demand in the first zone; once the trainer has checkpointed, asks for spot in the second."""

    name = "on_demand_then_spot"

    def __init__(self, **_):
        pass

    def place(self, ctx):
        return Launch(ctx.zones[0], "on-demand", "start on on-demand")

    def decide(self, ctx):
        if ctx.current.market == "on-demand" and ctx.progress:
            return Launch(ctx.zones[1], "spot", "spot is back")
        return Keep("stay")


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    for name, value in {"SPOTRUN_HOME": str(home), "SPOTRUN_RECONSIDER_EVERY": "0.5", "SPOTRUN_HEARTBEAT_TIMEOUT": "20",
                        "SPOTRUN_BACKOFF_BASE": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SPOTRUN_DATABASE_URL", raising=False)
    for scripted in (OnDemandThenSpotElsewhere,):
        monkeypatch.setitem(policy._POLICIES, scripted.name, scripted)
    yield home
    cloud = LocalProvider(home / "local-cloud")
    for instance in cloud.list_instances():
        if instance.state != "terminated":
            cloud.terminate(instance.instance_id)


def run_daemon_until_done(store: Store, job_id: int, timeout: float = 120.0) -> Job:
    daemon = Daemon(store, tick_interval=0.2, idle_exit=0)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with store.session() as session:
                job = session.get(Job, job_id)
                if is_terminal(job.state):
                    return job
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} did not end within {timeout:.0f} s")
    finally:
        daemon.stop()
        thread.join(timeout=30)


# A soak run (`make soak`, ~32 s): a single node's make-before-break move runs end to end in
# tests/clouds_e2e (AWS's rebalance recommendation)
@pytest.mark.soak
def test_a_job_moved_make_before_break_resumes_exactly_on_the_new_instance(home, tmp_path):
    reference = reference_digits(tmp_path, epochs=8)
    extra = "estimated_duration: 1m\n"
    spec_file = digits_job(tmp_path, epochs=8, extra=extra)
    spec_file.write_text(spec_file.read_text().replace(
        "spot: {preemptions_before_fallback: 5}", "spot: {policy: on_demand_then_spot, deadline: 1h}"
    ))
    store = Store()
    job_id = jobs.submit(store, load_spec(spec_file), time.time(), spec_dir=spec_file.parent)

    job = run_daemon_until_done(store, job_id)
    assert job.state == "SUCCEEDED", job.failure_reason
    with store.session() as session:
        first, second = session.query(Attempt).filter_by(job_id=job_id).order_by(Attempt.number).all()
        kinds = [e.kind for e in session.query(Event).filter_by(job_id=job_id).order_by(Event.id)]
    assert (first.market, first.end_reason) == ("on-demand", "migrated")
    assert (second.market, second.end_reason, second.standby_for) == ("spot", "succeeded", first.id)
    assert second.zone != first.zone
    # made before broken: the new instance and its agent were up before the old attempt was asked to stop
    assert second.agent_started_at < first.notice_at < first.ended_at
    assert kinds.index("move_started") < kinds.index("move_requested") < kinds.index("move_taken_over")
    assert job.preemptions == 0 and job.restarts_on_error == 0
    resumed = re.search(r"starting at step (\d+)", attempt_log(store, job_id, 2))
    assert resumed and int(resumed.group(1)) > 0  # from the checkpoint the old trainer wrote when asked to stop
    assert final_result(home, job_id)["sha256"] == reference["sha256"]


# A soak run (`make soak`, ~50 s): tests/control/test_controller_gang_moves.py moves gangs against the fake cloud,
# and a single node's move runs end to end in tests/clouds_e2e (AWS's rebalance recommendation)
@pytest.mark.soak
def test_a_gang_moved_from_on_demand_to_spot_trains_on_until_its_standbys_are_up_and_ends_with_the_same_weights(
    home, tmp_path
):
    reference = reference_ddp(tmp_path, nodes=2, epochs=10)
    spec_file = ddp_job(tmp_path, nodes=2, epochs=10, extra="estimated_duration: 1m\n")
    spec_file.write_text(spec_file.read_text().replace(
        "spot: {preemptions_before_fallback: 5}", "spot: {policy: on_demand_then_spot, deadline: 1h}"
    ))
    store = Store()
    job_id = jobs.submit(store, load_spec(spec_file), time.time(), spec_dir=spec_file.parent)

    job = run_daemon_until_done(store, job_id, timeout=180)
    assert job.state == "SUCCEEDED", job.failure_reason
    with store.session() as session:
        tries = session.query(Attempt).filter_by(job_id=job_id).order_by(Attempt.number).all()
        ended = session.query(Generation).filter_by(job_id=job_id).order_by(Generation.number).all()
        kinds = [e.kind for e in session.query(Event).filter_by(job_id=job_id).order_by(Event.id)]
    old, new = tries[:2], tries[2:]
    assert [(a.node_rank, a.market, a.end_reason) for a in tries] == [
        (0, "on-demand", "migrated"), (1, "on-demand", "migrated"), (0, "spot", "succeeded"), (1, "spot", "succeeded"),
    ]
    assert [a.standby_for for a in new] == [a.id for a in old] and new[0].zone != old[0].zone
    # made before broken: both new nodes' agents were up before the old ranks were asked to stop
    assert max(a.agent_started_at for a in new) < min(a.notice_at for a in old)
    assert [g.end_reason for g in ended] == ["moved", "succeeded"] and "to spot in" in ended[0].stop_reason
    assert kinds.count("move_started") == 1 and kinds.count("move_requested") == 2
    assert job.preemptions == 0 and job.restarts_on_error == 0
    log_text = attempt_log(store, job_id, 3)
    resumed = [int(step) for step in re.findall(r"rank \d+: first step (\d+) done", log_text)]
    assert resumed and resumed[0] > 0  # from the checkpoint both ranks committed when asked to stop
    assert final_ddp_result(home, job_id)["sha256"] == reference["sha256"]


def attempt_log(store: Store, job_id: int, number: int) -> str:
    with store.session() as session:
        attempt = next(a for a in session.get(Job, job_id).attempts if a.number == number)
        return read_log(session, attempt).decode()
