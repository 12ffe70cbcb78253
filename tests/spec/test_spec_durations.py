import math

import pytest

from spotrun.spec import parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (90, 90.0),
        (2.5, 2.5),
        ("90", 90.0),
        ("1.5", 1.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1d", 86400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("1d2h3m4s500ms", 86400 + 7200 + 180 + 4.5),
        ("2H", 7200.0),
        ("  45s ", 45.0),
        ("0s", 0.0),
    ],
)
def test_parses_durations(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "expected_in_message"),
    [
        ("abc", "must be a duration like 90s, 10m, 2h"),
        ("", "must be a duration"),
        ("10x", "got '10x'"),
        ("m", "must be a duration"),
        ("1m1h", "must be a duration"),  # units out of order
        ("1h1h", "must be a duration"),  # a unit twice
        ("1.h", "must be a duration"),
        ("-5", "must not be negative"),
        ("-5m", "must not be negative"),
        (-1, "must not be negative; got -1"),
        (-0.5, "must not be negative"),
        (math.inf, "must be a finite duration"),
        (math.nan, "must be a finite duration"),
        (True, "got true"),
        (None, "got null"),
        ([1], "got a list"),
        ({"h": 1}, "got a mapping"),
    ],
)
def test_rejects_bad_durations_with_a_clear_message(value, expected_in_message):
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert expected_in_message in str(caught.value)


@pytest.mark.parametrize("value", ["3651d", "99999999999999999999d", 1e20, 10**30])
def test_rejects_durations_longer_than_ten_years(value):
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert "must be at most 3650d (10 years)" in str(caught.value)


def test_ten_years_is_the_longest_duration():
    assert parse_duration("3650d") == 3650 * 86400.0


@pytest.mark.parametrize(
    ("field", "written"),
    [("spot.restart_overhead", "spot: {restart_overhead: 99999999999999999999d}"),
     ("spot.deadline", "spot: {deadline: 99999999999999999999d}"),
     ("checkpoint.sync_interval", "checkpoint: {sync_interval: 100000d}"),
     ("checkpoint.final_backup_timeout", "checkpoint: {final_backup_timeout: 3651d}"),
     ("spot.notice_grace", "spot: {notice_grace: 1.0e+12}")],
)
def test_a_job_file_duration_past_ten_years_names_its_field(field, written):
    """A restart_overhead of 1e20 days with a deadline had the deadline-aware planner (the default policy's, once a
    job has an estimate) loop over as many restart ages: the controller's tick never returned, and no other job was
    driven. A sync_interval past threading's wait limit ended the agent's backup thread with an OverflowError."""
    from spotrun.spec import SpecError, parse_spec

    with pytest.raises(SpecError) as caught:
        parse_spec(f"run: x\nestimated_duration: 1h\n{written}\n")
    [problem] = caught.value.problems
    assert (problem.field, problem.line) == (field, 3)
    assert "must be at most 3650d (10 years)" in problem.message
