"""End to end on one machine: the real CLI, controller daemon, local cloud, agent and the digits trainer."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import digits_job, final_result, reference_digits
from spotrun.state import Attempt, Job

pytestmark = pytest.mark.xdist_group("e2e")  # with `make test`'s workers: one e2e test at a time


def running_with_checkpoint(attempts: int, past_step: int = -1):
    def check(row: dict) -> bool:
        return (
            row["state"] == "RUNNING" and row["attempts"] == attempts
            and row["checkpoint_step"] is not None and row["checkpoint_step"] > past_step
        )

    return check


def test_preempted_job_resumes_exactly_and_reports_its_cost(spotrun, tmp_path):
    launched = spotrun.run("launch", str(digits_job(tmp_path)))
    assert "launched job 1" in launched.stdout

    step = -1
    for attempt in (1, 2):
        row = spotrun.wait_for(1, running_with_checkpoint(attempt, step), what=f"attempt {attempt} checkpointing")
        step = row["checkpoint_step"]
        spotrun.run("preempt", "1")
        spotrun.wait_for(1, lambda r, a=attempt: r["preemptions"] == a, what=f"preemption {attempt}")

    with ThreadPoolExecutor(1) as background:
        # the uninterrupted run trains while the last attempt's trainer sleeps; not sooner, where it would slow the
        # `spotrun preempt` commands while the job trains towards its end
        uninterrupted = background.submit(reference_digits, tmp_path)
        done = spotrun.wait_for(1, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=120, what="the end")
    reference = uninterrupted.result()
    assert done["state"] == "SUCCEEDED", spotrun.controller_log()
    assert done["preemptions"] == 2 and done["attempts"] == 3
    with ThreadPoolExecutor(3) as cli:  # commands that only read, at once
        status, logs, cost = cli.map(lambda command: spotrun.run(*command).stdout,
                                     [("status", "1", "--json"), ("logs", "1"), ("cost", "1")])
    assert json.loads(status)[0] == spotrun.status(1)  # the harness's polls read what the CLI prints

    final = final_result(spotrun.home, 1)
    assert final["sha256"] == reference["sha256"]
    assert final["accuracy"] == pytest.approx(reference["accuracy"])

    assert [line.split(" · ")[0] for line in logs.splitlines() if line.startswith("────")] == [
        "──── attempt 1", "──── attempt 2", "──── attempt 3"
    ]
    assert "test accuracy" in logs

    assert "spot" in cost and "on-demand only" in cost and "saved" in cost
    assert not spotrun.instance_processes()


def assert_nothing_lost(spotrun) -> None:
    """One job, its attempts numbered 1, 2, ... with an instance each at most; every instance the cloud launched
    recorded by an attempt and terminated; no agent or trainer left running."""
    store = spotrun.store()
    with store.session() as session:
        attempts = session.query(Attempt).order_by(Attempt.number).all()
        assert session.query(Job).count() == 1
    store.dispose()
    numbers = [a.number for a in attempts]
    assert numbers == list(range(1, len(numbers) + 1))
    placed = [a.instance_id for a in attempts if a.instance_id]
    assert len(placed) == len(set(placed)), "two attempts share an instance"
    launched = {i.instance_id: i for i in spotrun.cloud.list_instances()}
    assert set(launched) == set(placed), "an instance was launched that no attempt recorded (or the reverse)"
    assert all(i.state == "terminated" for i in launched.values())
    assert not spotrun.instance_processes(), "an agent or trainer outlived its job"


def test_controller_killed_while_its_job_runs_and_is_placed_again_loses_nothing(spotrun, tmp_path):
    spotrun.run("launch", str(digits_job(tmp_path)))
    spotrun.wait_for(1, running_with_checkpoint(1), what="the first checkpoint")
    spotrun.kill_controller()
    row = spotrun.status(1)  # the store still tells the truth with no controller at all
    assert row["state"] == "RUNNING", row
    spotrun.run("preempt", "1")  # the cloud takes the instance while nobody watches
    spotrun.start_controller()  # at once: it takes the lease over from the dead controller
    spotrun.wait_for(1, lambda r: r["attempts"] == 2, what="the replacement attempt")
    spotrun.kill_controller()  # while the replacement is being placed
    spotrun.start_controller()
    done = spotrun.wait_for(1, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=150, what="the end")
    assert done["state"] == "SUCCEEDED", spotrun.controller_log()
    assert done["preemptions"] == 1, done
    assert_nothing_lost(spotrun)


# A soak run (`make soak`, ~30 s): the controller is killed before and after every side effect of seven job stories
# in tests/control/test_crash_points.py, and a real controller process is SIGKILLed twice while its job runs, is
# preempted and is placed again in the test above
@pytest.mark.soak
def test_controller_killed_at_random_moments_loses_nothing(spotrun, tmp_path):
    rng = random.Random(7)
    spotrun.run("launch", str(digits_job(tmp_path, epochs=8)))
    spotrun.wait_for(1, running_with_checkpoint(1), what="the first checkpoint")
    kills = 0
    preempted_while_down = False
    while spotrun.status(1)["state"] not in ("SUCCEEDED", "FAILED") and kills < 4:
        time.sleep(rng.uniform(0.2, 2.5))
        if spotrun.controller_pid() is None:
            spotrun.start_controller()
            continue
        spotrun.kill_controller()
        kills += 1
        row = spotrun.status(1)  # the store still tells the truth with no controller at all
        assert row["state"] in ("PROVISIONING", "RUNNING", "PREEMPTED", "WAITING", "SUCCEEDED")
        if not preempted_while_down and row["state"] == "RUNNING":
            spotrun.run("preempt", "1")  # the cloud takes the instance while nobody watches
            preempted_while_down = True
        time.sleep(rng.uniform(0.0, 1.5))
        spotrun.start_controller()
    assert kills >= 2
    if spotrun.controller_pid() is None:
        spotrun.start_controller()
    done = spotrun.wait_for(1, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=150, what="the end")
    assert done["state"] == "SUCCEEDED", spotrun.controller_log()
    assert done["preemptions"] >= (1 if preempted_while_down else 0)
    assert_nothing_lost(spotrun)


def test_bad_job_file_is_refused_and_the_store_is_unchanged(spotrun, tmp_path):
    # a job still running when it is cancelled, however slow the machine; it trains nothing, to leave the CPU alone
    job = tmp_path / "waiting.yaml"
    job.write_text("name: waiting-e2e\nrun: sleep 600\nresources: {cloud: local, instance_type: local.cpu}\n")
    spotrun.run("launch", str(job))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nrun: python train.py\nspot:\n  max_wait: -5m\n  colour: blue\nmax_restarts_on_error: many\n")
    refused = spotrun.run("launch", str(bad), check=False)
    assert refused.returncode == 2
    assert "bad.yaml:4: spot.max_wait" in refused.stderr
    assert "bad.yaml:5: spot.colour" in refused.stderr
    assert "bad.yaml:6: max_restarts_on_error" in refused.stderr
    after = json.loads(spotrun.run("status", "--json").stdout)
    assert [(r["id"], r["name"]) for r in after] == [(1, "waiting-e2e")]
    spotrun.run("cancel", "1")
    spotrun.wait_for(1, lambda r: r["state"] == "CANCELLED", what="the cancel")


def test_a_command_that_fails_at_once_reads_in_order_and_says_nothing_of_checkpoints(spotrun, tmp_path):
    """A user's report: in `launch --follow`, each attempt ended before the job was RUNNING on it, and each failure
    said checkpoints were backed up, in a job that saves none."""
    job = tmp_path / "fails.yaml"
    job.write_text("name: fails-at-once\nrun: exit 3\nresources: {cloud: local}\nmax_restarts_on_error: 1\n")
    followed = spotrun.run("launch", str(job), "--follow", check=False, timeout=120)
    assert "job 1 FAILED after 2 attempts" in followed.stdout, followed.stdout + followed.stderr

    lines = followed.stdout.splitlines()
    running = [i for i, line in enumerate(lines) if "→ RUNNING: agent started on" in line]
    ended = [i for i, line in enumerate(lines) if "ended: failed" in line]
    assert len(running) == len(ended) == 2, followed.stdout
    assert running[0] < ended[0] < running[1] < ended[1], followed.stdout
    assert "backed up" not in followed.stdout
    assert_nothing_lost(spotrun)
