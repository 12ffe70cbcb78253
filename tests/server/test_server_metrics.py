"""/metrics is computed from the store: jobs by state, preemptions, recoveries and their time, dollars."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_world import Team, place_attempt

from spotrun.state import Attempt, Job


def samples(team: Team) -> dict[tuple[str, tuple], float]:
    response = team.client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text) for sample in family.samples
    }


def end(team: Team, attempt_id: int, reason: str, ended_at: float, notice_at: float | None = None) -> None:
    with team.store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        attempt.state, attempt.end_reason, attempt.ended_at, attempt.notice_at = "ended", reason, ended_at, notice_at
        attempt.billed_seconds = ended_at - attempt.started_at


def test_metrics_follow_the_store(team: Team) -> None:
    assert samples(team)[("spotrun_jobs", (("state", "PENDING"),))] == 0
    job_id = team.launch("alice")
    team.launch("bob")
    first = place_attempt(team.store, job_id, "t1", number=1, at=1000.0)
    end(team, first, "preempted", ended_at=1090.0, notice_at=1080.0)
    second = place_attempt(team.store, job_id, "t2", number=2, at=1100.0)
    with team.store.session() as session:
        session.get(Attempt, second).agent_started_at = 1105.0  # 25 s after the notice
        session.get(Job, job_id).state = "RUNNING"
    end(team, second, "preempted", ended_at=1200.0)  # no notice: the end counts; never recovered
    seen = samples(team)

    assert seen[("spotrun_jobs", (("state", "RUNNING"),))] == 1
    assert seen[("spotrun_jobs", (("state", "PENDING"),))] == 1
    assert seen[("spotrun_preemptions_total", ())] == 2
    assert seen[("spotrun_recoveries_total", ())] == 1
    assert seen[("spotrun_recovery_seconds_count", ())] == 1
    assert seen[("spotrun_recovery_seconds_sum", ())] == 25
    assert seen[("spotrun_recovery_seconds_bucket", (("le", "10.0"),))] == 0
    assert seen[("spotrun_recovery_seconds_bucket", (("le", "30.0"),))] == 1
    # 190 s billed at $0.10/h against $0.40/h on-demand, of a job still running: saved so far, not yet saved
    assert seen[("spotrun_dollars_spent", ())] == pytest.approx(190 / 3600 * 0.1)
    assert seen[("spotrun_dollars_saved_so_far", ())] == pytest.approx(190 / 3600 * 0.3)
    assert seen[("spotrun_dollars_saved", ())] == 0


def test_metrics_stay_finite_and_count_an_attempt_stored_at_a_price_no_instance_has(team: Team) -> None:
    """A job stored before prices were capped, at 1e308 $/h: /metrics read +Inf spent and NaN saved on SQLite, and
    answered 500 on PostgreSQL (the sum's product out of range). Its attempt is left out, and counted."""
    absurd, other = team.launch("alice"), team.launch("bob")
    stored_before_the_cap = place_attempt(team.store, absurd, "t1", at=1000.0)
    end(team, place_attempt(team.store, other, "t2", at=1000.0), "failed", ended_at=1190.0)
    with team.store.session() as session:
        session.get(Attempt, stored_before_the_cap).price_per_hour = 1e308
        session.get(Attempt, stored_before_the_cap).on_demand_price_per_hour = 1e308
    end(team, stored_before_the_cap, "failed", ended_at=8200.0)
    seen = samples(team)

    assert seen[("spotrun_unpriced_attempts", ())] == 1
    assert seen[("spotrun_dollars_spent", ())] == pytest.approx(190 / 3600 * 0.1)  # the other job's, as before
    assert seen[("spotrun_dollars_saved_so_far", ())] == pytest.approx(190 / 3600 * 0.3)  # both jobs are PENDING


def test_dollars_saved_are_the_succeeded_jobs_and_failed_or_cancelled_ones_spent_without_a_result(team: Team) -> None:
    """The fleet's saving counted every job's: a failed job's hour on spot "saved" its discount, where the job's own
    line says it spent its dollars without a result. Each job here held its instance an hour, at $0.10/h against
    $0.40/h on-demand."""
    jobs = {state: team.launch("alice") for state in ("SUCCEEDED", "FAILED", "CANCELLED", "RUNNING")}
    for number, (state, job_id) in enumerate(jobs.items(), start=1):
        attempt_id = place_attempt(team.store, job_id, f"t{number}", at=1000.0)
        end(team, attempt_id, "succeeded" if state == "SUCCEEDED" else "preempted", ended_at=4600.0)
        with team.store.session() as session:
            session.get(Job, job_id).state = state
    seen = samples(team)

    assert seen[("spotrun_dollars_spent", ())] == pytest.approx(4 * 0.1)
    assert seen[("spotrun_dollars_saved", ())] == pytest.approx(0.3)  # the succeeded job's only
    assert seen[("spotrun_dollars_saved_so_far", ())] == pytest.approx(0.3)  # the running one's, provisional
    assert seen[("spotrun_dollars_spent_without_result", ())] == pytest.approx(2 * 0.1)


def test_early_warnings_are_counted_by_warning_and_how_the_attempt_ended(team: Team) -> None:
    job_id = team.launch("alice")
    warned = {"aws-imds/rebalance": ("preempted", "migrated", None), "gcp-metadata/maintenance MIGRATE": (None,)}
    number = 0
    for warning, ends in warned.items():
        for reason in ends:
            number += 1
            attempt_id = place_attempt(team.store, job_id, f"w{number}", number=number, at=1000.0 * number)
            with team.store.session() as session:
                attempt = session.get(Attempt, attempt_id)
                attempt.warned_at, attempt.warning = 1000.0 * number + 5, warning
            if reason is not None:
                end(team, attempt_id, reason, ended_at=1000.0 * number + 50)
    place_attempt(team.store, job_id, "quiet", number=number + 1, at=9000.0)  # never warned: not counted
    seen = samples(team)
    counted = {labels: value for (name, labels), value in seen.items() if name == "spotrun_early_warnings"}
    assert counted == {
        (("end", "preempted"), ("warning", "aws-imds/rebalance")): 1,
        (("end", "migrated"), ("warning", "aws-imds/rebalance")): 1,
        (("end", "running"), ("warning", "aws-imds/rebalance")): 1,
        (("end", "running"), ("warning", "gcp-metadata/maintenance MIGRATE")): 1,
    }


def test_metrics_need_no_token_and_reveal_no_names(team: Team) -> None:
    team.launch("alice")
    text = team.client.get("/metrics").text
    assert "alice" not in text and "tiny" not in text


def counter_samples(team: Team) -> dict[tuple[str, tuple], float]:
    families = text_string_to_metric_families(team.client.get("/metrics").text)
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families if family.type == "counter" for sample in family.samples
    }


def test_no_counter_falls_when_a_warned_attempt_ends(team: Team) -> None:
    """Early warnings were a counter by how the attempt ended, "running" while it had not: that series fell by one
    when the attempt ended, which Prometheus reads as a counter reset (rate() and increase() then count the whole
    series again). Counts of attempts by a state they leave are a gauge, as jobs by state are."""
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "w1", number=1, at=1000.0)
    with team.store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        attempt.warned_at, attempt.warning = 1005.0, "aws-imds/rebalance"
    before = counter_samples(team)
    end(team, attempt_id, "preempted", ended_at=1050.0)
    after = counter_samples(team)
    fallen = {key: (value, after.get(key, 0.0)) for key, value in before.items() if after.get(key, 0.0) < value}
    assert fallen == {}
    warned = {labels: value for (name, labels), value in samples(team).items() if name == "spotrun_early_warnings"}
    assert warned == {(("end", "preempted"), ("warning", "aws-imds/rebalance")): 1}
