"""Deadlines (absolute and relative), the JSON round trip, and resolving the working folder."""

import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

import spotrun
from spotrun.spec import JobSpec, SpecError, parse_spec
from spotrun.user_paths import UnknownUser

SUBMITTED_AT = 1_700_000_000.0


def deadline_spec(deadline: str) -> JobSpec:
    return parse_spec(f"run: x\nspot:\n  deadline: {deadline}\n")


@pytest.mark.parametrize(
    ("deadline", "expected"),
    [
        ("2030-01-01T00:00:00Z", datetime(2030, 1, 1, tzinfo=UTC)),
        ("2030-01-01 02:00:00+02:00", datetime(2030, 1, 1, tzinfo=UTC)),
        ("'2030-01-01T00:00:00+00:00'", datetime(2030, 1, 1, tzinfo=UTC)),  # quoted: a string, not a YAML timestamp
        ("'2029-12-31T19:00:00-05:00'", datetime(2030, 1, 1, tzinfo=UTC)),
    ],
)
def test_absolute_deadline_is_a_moment_independent_of_submission(deadline, expected):
    spec = deadline_spec(deadline)
    assert spec.deadline_at(SUBMITTED_AT) == expected.timestamp()
    assert spec.deadline_at(0.0) == expected.timestamp()


@pytest.mark.parametrize(("deadline", "seconds"), [("12h", 43200.0), ("90", 90.0), ("3600", 3600.0), ("1h30m", 5400.0)])
def test_relative_deadline_counts_from_submission(deadline, seconds):
    spec = deadline_spec(deadline)
    assert spec.spot.deadline == seconds
    assert spec.deadline_at(SUBMITTED_AT) == SUBMITTED_AT + seconds


def test_no_deadline_means_none():
    assert parse_spec("run: x").deadline_at(SUBMITTED_AT) is None


@pytest.mark.parametrize(
    ("deadline", "message"),
    [
        ("2030-01-01T00:00:00", "has no timezone"),
        ("'2030-01-01T00:00:00'", "has no timezone"),
        ("2030-01-01", "must be a date and time with a timezone"),
        ("tomorrow", "or a duration after launch like 12h; got 'tomorrow'"),
        ("-1h", "must be a date and time with a timezone"),
        ("-5", "must not be negative"),
        ("true", "got true"),
    ],
)
def test_bad_deadline_names_the_field_and_says_what_is_wrong(deadline, message):
    with pytest.raises(SpecError) as caught:
        deadline_spec(deadline)
    [problem] = caught.value.problems
    assert (problem.field, problem.line) == ("spot.deadline", 3)
    assert message in problem.message


def full_spec() -> JobSpec:
    return parse_spec(
        "name: j\nrun: x\nenv: {A: '1'}\n"
        "resources: {cloud: aws, accelerators: 'V100:2'}\n"
        "spot: {zones: [a, b], deadline: 2030-01-01T00:00:00+05:30, max_wait: 1h, max_price: 0.5}\n"
        "checkpoint: {store: 'file:///tmp/store'}\n"
        "estimated_duration: 1.5h\n"
    )


@pytest.mark.parametrize("spec", [full_spec(), parse_spec("run: x"), deadline_spec("2h")], ids=["full", "min", "rel"])
def test_to_json_is_json_safe_and_round_trips(spec):
    data = spec.to_json()
    through_text = json.loads(json.dumps(data))

    assert through_text == data
    assert JobSpec.model_validate(through_text) == spec


def test_to_json_writes_durations_as_seconds_and_deadlines_as_iso_text():
    data = full_spec().to_json()
    assert data["spot"]["max_wait"] == 3600.0
    assert data["estimated_duration"] == 5400.0
    assert data["spot"]["deadline"] == "2030-01-01T00:00:00+05:30"
    assert data["resources"]["accelerators"] == {"V100": 2}


def test_round_trip_keeps_the_deadline_kind():
    absolute = JobSpec.model_validate(full_spec().to_json())
    relative = JobSpec.model_validate(deadline_spec("2h").to_json())
    assert absolute.spot.deadline == datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert relative.deadline_at(SUBMITTED_AT) == SUBMITTED_AT + 7200


def test_relative_workdir_is_taken_from_the_job_files_folder(tmp_path):
    spec = parse_spec("run: x\nworkdir: code/../src\n")
    assert spec.resolved_workdir(tmp_path) == str(tmp_path / "src")
    assert spec.resolved_workdir(str(tmp_path)) == str(tmp_path / "src")


def test_absolute_workdir_ignores_the_job_files_folder(tmp_path):
    spec = parse_spec(f"run: x\nworkdir: {tmp_path / 'abs'}\n")
    assert spec.resolved_workdir("/elsewhere") == str(tmp_path / "abs")


def test_home_relative_workdir_is_expanded(tmp_path):
    spec = parse_spec("run: x\nworkdir: ~/proj\n")
    assert spec.resolved_workdir(tmp_path) == os.path.join(os.path.expanduser("~"), "proj")


def test_the_home_folder_of_a_user_this_machine_lacks_is_an_error_naming_the_user(tmp_path):
    spec = parse_spec("run: x\nworkdir: ~nosuchuser/proj\ncheckpoint: {store: ~nosuchuser/ckpt}\n")
    with pytest.raises(UnknownUser, match="'~nosuchuser/proj' starts with ~nosuchuser, but this machine has no user"):
        spec.resolved_workdir(tmp_path)
    with pytest.raises(UnknownUser, match="'~nosuchuser/ckpt' starts with ~nosuchuser"):
        spec.resolved_checkpoint_store(tmp_path)


def test_every_user_path_is_expanded_by_one_function():
    """pathlib's expanduser raises a bare RuntimeError for an unknown user; `expand_user` names the user."""
    source = Path(spotrun.__file__).parent
    expanding = sorted(str(path.relative_to(source)) for path in source.rglob("*.py")
                       if "expanduser(" in path.read_text(encoding="utf-8"))
    assert expanding == ["user_paths.py"]


def test_no_workdir_resolves_to_none(tmp_path):
    assert parse_spec("run: x").resolved_workdir(tmp_path) is None


@pytest.mark.parametrize(
    ("store", "expected"),
    [("relstore", "{base}/relstore"), ("../up/ckpt", "{parent}/up/ckpt"), ("/abs/ckpt", "/abs/ckpt"),
     ("s3://bucket/run", "s3://bucket/run"), ("file:///tmp/x", "file:///tmp/x")],
)
def test_a_local_checkpoint_store_is_made_absolute_from_the_job_files_folder(tmp_path, store, expected):
    spec = parse_spec(f"run: x\ncheckpoint: {{store: '{store}'}}\n")
    assert spec.resolved_checkpoint_store(tmp_path) == expected.format(base=tmp_path, parent=tmp_path.parent)
    assert parse_spec("run: x").resolved_checkpoint_store(tmp_path) is None
